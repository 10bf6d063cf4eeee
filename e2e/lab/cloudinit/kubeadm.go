package cloudinit

import (
	"fmt"
	"strings"
)

// SentinelFile is where CABPK's command records a successful bootstrap (CAPI's contract with
// infrastructure providers that check it).
const SentinelFile = "/run/cluster-api/bootstrap-success.complete"

// KubeadmStep is the kubeadm command among a machine's commands, as CABPK writes it:
// `kubeadm init|join --config <file> [-v N] && echo success > <SentinelFile>`.
type KubeadmStep struct {
	// Join: `kubeadm join` (a machine joining a running control plane); else `kubeadm init`.
	Join bool
	// Config is the file kubeadm reads (one of write_files).
	Config string
	// Index is its place in Commands: the commands before it are preKubeadmCommands, those after
	// postKubeadmCommands.
	Index int
}

// Kubeadm finds the one kubeadm command in c.Commands.
func (c *Config) Kubeadm() (KubeadmStep, error) {
	var found []KubeadmStep
	for i, cmd := range c.Commands {
		fields := strings.Fields(cmd)
		if len(fields) < 2 || fields[0] != "kubeadm" || (fields[1] != "init" && fields[1] != "join") {
			continue
		}
		step, err := parseKubeadm(fields)
		if err != nil {
			return KubeadmStep{}, fmt.Errorf("cloudinit: runcmd[%d] %q: %w", i, cmd, err)
		}
		step.Index = i
		found = append(found, step)
	}
	if len(found) != 1 {
		return KubeadmStep{}, fmt.Errorf("cloudinit: want one `kubeadm init` or `kubeadm join` command, found %d in %q", len(found), c.Commands)
	}
	if c.File(found[0].Config) == nil {
		return KubeadmStep{}, fmt.Errorf("cloudinit: kubeadm reads %s, which write_files does not write", found[0].Config)
	}
	return found[0], nil
}

func parseKubeadm(fields []string) (KubeadmStep, error) {
	step := KubeadmStep{Join: fields[1] == "join"}
	rest := fields[2:]
	for len(rest) > 0 {
		switch f := rest[0]; {
		case f == "--config" && len(rest) > 1:
			step.Config, rest = rest[1], rest[2:]
		case f == "-v" && len(rest) > 1:
			rest = rest[2:]
		case strings.HasPrefix(f, "-v=") || strings.HasPrefix(f, "--v="):
			rest = rest[1:]
		case f == "&&":
			if strings.Join(rest[1:], " ") != "echo success > "+SentinelFile {
				return step, fmt.Errorf("after kubeadm: want only CABPK's sentinel (echo success > %s)", SentinelFile)
			}
			rest = nil
		default:
			return step, fmt.Errorf("kubeadm argument %q: the lab runs kubeadm with --config (and -v) only", f)
		}
	}
	if step.Config == "" {
		return step, fmt.Errorf("kubeadm without --config")
	}
	return step, nil
}
