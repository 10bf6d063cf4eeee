package lifecycle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/caplb/caplb/e2e/harness"
)

// managerProc is the real `caplb manager` binary, a child process of the lab, acting as the
// ServiceAccount the shipped RBAC binds (impersonated): it can do exactly what an installed
// manager can.
type managerProc struct {
	cmd  *exec.Cmd
	done chan error
}

func startManager(bin, dir string, cfg *rest.Config, agentImage string) (*managerProc, error) {
	ns, name, _ := strings.Cut(harness.ShippedServiceAccount, "/")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["management"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["caplb"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		Token: cfg.BearerToken, Impersonate: "system:serviceaccount:" + ns + ":" + name,
		ImpersonateGroups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	kc.Contexts["caplb"] = &clientcmdapi.Context{Cluster: "management", AuthInfo: "caplb"}
	kc.CurrentContext = "caplb"
	path := filepath.Join(dir, "manager.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "manager.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// --webhook-port=0: the lab registers no webhook and has no serving certificate.
	cmd := exec.Command(bin, "manager", "--kubeconfig", path, "--diagnostics-address", "0",
		"--health-probe-bind-address", "0", "--agent-image", agentImage, "--zap-log-level", "debug", "--webhook-port=0")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s manager: %w", bin, err)
	}
	p := &managerProc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); log.Close() }()
	return p, nil
}

// alive reports an error when the manager has exited.
func (p *managerProc) alive() error {
	select {
	case err := <-p.done:
		p.done <- err
		return fmt.Errorf("the caplb manager exited: %v", err)
	default:
		return nil
	}
}

// stop shuts the manager down gracefully (SIGTERM), then kills it.
func (p *managerProc) stop() {
	if p == nil || p.alive() != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// crashManager kills the manager (SIGKILL: a crash, an OOM kill, its node lost) and starts a
// new one, as its Deployment would: nothing of the old one's memory survives.
func (l *Lab) crashManager() error {
	if err := l.manager.alive(); err != nil {
		return err
	}
	_ = l.manager.cmd.Process.Kill()
	l.manager.done <- <-l.manager.done
	m, err := startManager(l.opts.Binaries.Manager, l.net.Dir(), l.Mgmt.Config, AgentImage)
	if err != nil {
		return err
	}
	l.manager = m
	return nil
}
