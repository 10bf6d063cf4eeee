//go:build linux

package realcp

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
	vipbackend "github.com/caplb/caplb/providers/vip"
)

// sample is the shipped sample the lab follows: the agents' files are rendered from its
// LoadBalancer and reach a machine through its KubeadmControlPlane's files; its
// apiServer.extraArgs are the kube-apiservers' flags.
const sample = "cluster_kubeadm_arp_ipam.yaml"

// agentImage names the agent's image in the rendered static pod (the manager's --agent-image);
// the lab's kubelet runs the built binary for it.
const agentImage = "caplb-agent:lab"

// agentPod is the agent's static pod (its manifest's base name), which names its process log.
const agentPod = "caplb-agent"

// bootstrap is what a machine's bootstrap writes for caplb: the files of the sample's
// KubeadmControlPlane, with their content from the bootstrap Secret.
type bootstrap struct {
	files  []lab.BootFile
	secret *corev1.Secret
}

// renderBootstrap renders the bootstrap Secret (<cluster>-caplb-agent) caplb's manager keeps for
// the sample's LoadBalancer, with the manager's own renderers: the lab's VIP, its three machines
// as members, and a new gossip key (the manager generates one per Secret).
func (c *Lab) renderBootstrap() (bootstrap, error) {
	_, files, err := lab.SampleBootFiles(sample)
	if err != nil {
		return bootstrap{}, err
	}
	lb, _, err := lab.SampleObjects(sample, "default")
	if err != nil {
		return bootstrap{}, err
	}
	members := []agentv1.MemberConfig{}
	for _, m := range c.machines {
		members = append(members, agentv1.MemberConfig{Name: m.Name, Address: m.Addr.String()})
	}
	// The manager adds members one version at a time: three members are its third version, what
	// a machine created after all three joined gets from the Secret.
	cfg, err := vipbackend.RenderAgentConfig(lb, vip.String(), agentv1.Membership{Version: int64(len(members)), Members: members}, nil)
	if err != nil {
		return bootstrap{}, err
	}
	withoutNodeAPI(&cfg)
	config, err := vipbackend.MarshalConfig(cfg)
	if err != nil {
		return bootstrap{}, err
	}
	manifest, err := vipbackend.RenderAgentManifest(lb, agentImage)
	if err != nil {
		return bootstrap{}, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return bootstrap{}, fmt.Errorf("gossip key: %w", err)
	}
	return bootstrap{files: files, secret: &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: lb.Namespace, Name: vipbackend.SecretName(lb)},
		Data: map[string][]byte{
			agentv1.SecretConfigKey:    config,
			agentv1.SecretManifestKey:  manifest,
			agentv1.SecretGossipKeyKey: []byte(base64.StdEncoding.EncodeToString(key)),
		},
	}}, nil
}

// withoutNodeAPI is the lab's one change to the rendered configuration. No kubelet runs here, so
// no machine has a Node: the rendered Node API (membership updates, quiesce requests, the status
// report — failover uses none of them) would poll for a Node that never appears, twice a second
// per agent, through the VIP whose faults the lab measures. Without it the agent runs from its
// files and gossip, as the configuration's nodeAPI field documents.
func withoutNodeAPI(cfg *agentv1.AgentConfiguration) { cfg.NodeAPI = agentv1.NodeAPIConfig{} }

// startAgent writes caplb's bootstrap files on m as cloud-init's write_files does (the sample's
// paths and modes: 0600) and runs the agent's static pod with the lab's kubelet: the rendered
// manifest's volumes, read-only root and capabilities (NET_ADMIN and NET_RAW, nothing else).
func (c *Lab) startAgent(m *machine) (err error) {
	if err := lab.WriteBootFiles(m.Root, c.boot.files, c.boot.secret); err != nil {
		return fmt.Errorf("%s: caplb's bootstrap files: %w", m.Name, err)
	}
	m.agt, err = c.kubelet(m).Start(kubeadm.AgentManifest)
	return err
}

// agentLog is the path of m's agent's log.
func (c *Lab) agentLog(m *machine) string { return c.l.LogPath(m.Name + "-" + agentPod) }

// Privileges are a process's privileges as its kernel holds them (/proc/<pid>/status).
type Privileges struct {
	// Command is the process's name (after podrun's exec: the agent's).
	Command                                              string
	Effective, Permitted, Bounding, Inheritable, Ambient uint64
	NoNewPrivs                                           bool
}

// AgentPrivileges reads each running agent's privileges from the kernel, by machine.
func (c *Lab) AgentPrivileges() (map[string]Privileges, error) {
	out := map[string]Privileges{}
	for _, m := range c.machines {
		if m.agt == nil || m.nl == nil {
			continue
		}
		p, err := readPrivileges(m.agt.Pid())
		if err != nil {
			return nil, fmt.Errorf("%s's agent: %w", m.Name, err)
		}
		out[m.Name] = p
	}
	return out, nil
}

func readPrivileges(pid int) (Privileges, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return Privileges{}, err
	}
	var p Privileges
	sets := map[string]*uint64{"CapEff": &p.Effective, "CapPrm": &p.Permitted, "CapBnd": &p.Bounding,
		"CapInh": &p.Inheritable, "CapAmb": &p.Ambient}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch {
		case k == "Name":
			p.Command = v
		case k == "NoNewPrivs":
			p.NoNewPrivs = v == "1"
		case sets[k] != nil:
			if *sets[k], err = strconv.ParseUint(v, 16, 64); err != nil {
				return p, fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return p, nil
}

// APIServerArgs is the command line of machine name's running kube-apiserver.
func (c *Lab) APIServerArgs(name string) ([]string, error) {
	m := c.machine(name)
	if m == nil || m.apiserver == nil {
		return nil, fmt.Errorf("%s: no API server running", name)
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(m.apiserver.Pid()), "cmdline"))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}
