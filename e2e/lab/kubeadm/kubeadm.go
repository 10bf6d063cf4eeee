//go:build linux

// Package kubeadm makes the lab's real control-plane machines with real kubeadm: its own PKI,
// kubeconfigs and static-pod manifests for etcd and kube-apiserver, written into a machine's
// root directory (its "/") by `kubeadm init phase ... --rootfs <root>`, and run by the lab's
// kubelet (e2e/lab/podrun) from those manifests. etcd membership changes the way a real cluster
// changes it: a joining machine is added as a learner and promoted once it caught up; a leaving
// machine is removed as KubeadmControlPlane removes it. See README.md.
package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Paths on a kubeadm node, inside the machine's root.
const (
	// ConfigPath is where CAPI's kubeadm bootstrap writes kubeadm's configuration.
	ConfigPath    = "/run/kubeadm/kubeadm.yaml"
	PKIDir        = "/etc/kubernetes/pki"
	ManifestsDir  = "/etc/kubernetes/manifests"
	AdminConfPath = "/etc/kubernetes/admin.conf"
	// KubeletConfPath is the kubelet's kubeconfig (system:node:<name>).
	KubeletConfPath = "/etc/kubernetes/kubelet.conf"
	EtcdManifest    = ManifestsDir + "/etcd.yaml"
	APIManifest     = ManifestsDir + "/kube-apiserver.yaml"
	// ControllerManagerManifest is kube-controller-manager's static pod, which the lab's kubelet
	// runs only where Binaries.ControllerManager is set.
	ControllerManagerManifest = ManifestsDir + "/kube-controller-manager.yaml"
	// APIPort is the API server's port on every machine and on the endpoint.
	APIPort = 6443
	// EtcdClientPort and EtcdPeerPort are etcd's (kubeadm's defaults).
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
)

// SharedFiles are the cluster-wide keys every control-plane machine carries: what
// KubeadmControlPlane keeps in the cluster's CA Secrets (<cluster>-ca, -etcd, -proxy, -sa) and
// its bootstrap writes on each new machine before kubeadm runs. Paths are under PKIDir.
var SharedFiles = []string{
	"ca.crt", "ca.key", "sa.key", "sa.pub", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt", "etcd/ca.key",
}

// Cluster is one kubeadm cluster: its name, the endpoint (the VIP) every machine's
// ClusterConfiguration names as controlPlaneEndpoint, and the kubeadm binary.
type Cluster struct {
	Name     string
	Endpoint netip.Addr
	// Kubeadm is the kubeadm binary (built by `make testbin`).
	Kubeadm string
	// KubernetesVersion is the version kubeadm writes into the manifests (v1.36.3).
	KubernetesVersion string
	// APIServerArgs are ClusterConfiguration.apiServer.extraArgs (a KubeadmControlPlane's
	// kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs), in order.
	APIServerArgs []Arg
	// CertSANs are ClusterConfiguration.apiServer.certSANs: hosts the API servers' serving
	// certificate carries besides kubeadm's own (an endpoint the cluster moves to, or moved from).
	CertSANs []string
	// ControllerManagerArgs are ClusterConfiguration.controllerManager.extraArgs, e.g. the
	// controllers a lab runs (`controllers: bootstrapsigner,tokencleaner`: what joins need).
	ControllerManagerArgs []Arg
	// BootstrapToken is InitConfiguration.bootstrapTokens[0].token ("abcdef.0123456789abcdef"),
	// which kubeadm init's bootstrap-token phase creates for joins; empty: kubeadm makes one up.
	BootstrapToken string
}

// Arg is one of kubeadm's extraArgs.
type Arg struct{ Name, Value string }

// Machine is one control-plane machine: its node name, the address it advertises, and its root.
type Machine struct {
	Name string
	Addr netip.Addr
	// Root is the machine's "/" on the host.
	Root string
}

// PeerURL is the machine's etcd peer URL, as kubeadm writes it.
func (m Machine) PeerURL() string { return "https://" + hostPort(m.Addr, EtcdPeerPort) }

// ClientURL is the machine's etcd client URL, as kubeadm writes it.
func (m Machine) ClientURL() string { return "https://" + hostPort(m.Addr, EtcdClientPort) }

// Path is p (an absolute path on the machine) on the host.
func (m Machine) Path(p string) string { return filepath.Join(m.Root, p) }

func hostPort(a netip.Addr, port int) string { return netip.AddrPortFrom(a, uint16(port)).String() }

// Runner runs a command on the machine's network (a lab namespace): kubeadm's phases that
// talk to the API server reach it at the machine's own address, as on the node.
type Runner interface {
	Run(ctx context.Context, argv ...string) (string, error)
}

// Init writes the first machine's files: kubeadm's whole PKI, the admin, super-admin and kubelet
// kubeconfigs (the kubelet's as kubeadm init writes it for the node: a static pod that mounts it,
// caplb's agent, starts only once it is there), and the static-pod manifests of a new
// single-member etcd and of the API server.
func (c Cluster) Init(ctx context.Context, m Machine, on Runner) error {
	if err := c.writeConfig(m, nil); err != nil {
		return err
	}
	return c.phases(ctx, m, on, initFilePhases...)
}

// NewSharedKeys makes the cluster's shared keys the way KubeadmControlPlane does before its
// first Machine (it keeps them in the cluster's CA Secrets): kubeadm's CA phases run in dir, a
// scratch root. on runs kubeadm (any lab namespace).
func (c Cluster) NewSharedKeys(ctx context.Context, dir string, on Runner) (map[string][]byte, error) {
	m := Machine{Name: c.Name + "-keys", Addr: c.Endpoint, Root: dir}
	if err := c.writeConfig(m, nil); err != nil {
		return nil, err
	}
	if err := c.phases(ctx, m, on, "certs ca", "certs sa", "certs front-proxy-ca", "certs etcd-ca"); err != nil {
		return nil, err
	}
	return ReadShared(m)
}

// InitWithKeys is Init on a first machine whose bootstrap wrote the cluster's shared keys (as
// KubeadmControlPlane's does): kubeadm keeps them and makes the rest. It also writes the
// kubelet's kubeconfig (system:node:<name>), as kubeadm init does for the node's kubelet.
func (c Cluster) InitWithKeys(ctx context.Context, m Machine, on Runner, shared map[string][]byte) error {
	if err := writeShared(m, shared); err != nil {
		return err
	}
	if err := c.writeConfig(m, nil); err != nil {
		return err
	}
	return c.phases(ctx, m, on, initFilePhases...)
}

// InitWritten is Init on a first machine whose bootstrap wrote kubeadm's configuration
// (ConfigPath) and the cluster's shared keys, as CAPI's kubeadm bootstrap provider writes them
// for `kubeadm init --config`: kubeadm's phases that make files run from that configuration as
// written. The phases `kubeadm init` runs besides them need a kubelet or a container runtime
// (preflight, kubelet-start, wait-control-plane) or an API server (upload-config and on: see
// UploadConfig), and are the lab's.
func (c Cluster) InitWritten(ctx context.Context, m Machine, on Runner) error {
	if _, err := os.Stat(m.Path(ConfigPath)); err != nil {
		return fmt.Errorf("machine %s: its bootstrap wrote no kubeadm configuration: %w", m.Name, err)
	}
	return c.phases(ctx, m, on, initFilePhases...)
}

// initFilePhases are `kubeadm init`'s phases that write a first machine's files.
var initFilePhases = []string{"certs all", "kubeconfig admin", "kubeconfig super-admin", "kubeconfig kubelet",
	"kubeconfig controller-manager", "etcd local", "control-plane apiserver", "control-plane controller-manager"}

// MarkControlPlane runs kubeadm's mark-control-plane phase once m's Node is registered: the
// control-plane role label and taint, set with admin.conf as kubeadm init and join set them
// (a kubelet may not label itself so).
func (c Cluster) MarkControlPlane(ctx context.Context, m Machine, on Runner) error {
	return c.phases(ctx, m, on, "mark-control-plane")
}

// UploadConfig runs, once the first API server is ready, what kubeadm init does next: it
// uploads the ClusterConfiguration (kubeadm-config) and — through super-admin.conf — binds the
// group of admin.conf's user (kubeadm:cluster-admins) to cluster-admin (until then admin.conf
// can do nothing, as on a real node); uploads the kubelet's configuration (kubelet-config, which
// a join reads); creates the bootstrap token, its RBAC and kube-public/cluster-info (the
// kubeconfig `kubeadm join` discovers the cluster from); and the kube-proxy addon (its
// ConfigMap names the endpoint; no kube-controller-manager runs its DaemonSet).
func (c Cluster) UploadConfig(ctx context.Context, m Machine, on Runner) error {
	return c.phases(ctx, m, on, "upload-config kubeadm", "upload-config kubelet", "bootstrap-token", "addon kube-proxy")
}

// EtcdMember is a member of the running etcd cluster, as a joiner's --initial-cluster lists it.
type EtcdMember struct{ Name, PeerURL string }

// Join writes a joining machine's files: the shared keys (as KubeadmControlPlane's bootstrap
// writes them), then kubeadm generates its own certificates and kubeconfigs (admin, and the
// kubelet's, which a real join gets by TLS bootstrap) from them, and the manifests of an
// etcd member that joins the running cluster (initial-cluster: the members plus itself,
// initial-cluster-state: existing — what `kubeadm join` computes) and of the API server. The
// caller adds the member to etcd as a learner before starting it (see Etcd.AddLearner).
func (c Cluster) Join(ctx context.Context, m Machine, on Runner, shared map[string][]byte, members []EtcdMember) error {
	if err := writeShared(m, shared); err != nil {
		return err
	}
	if err := c.writeConfig(m, append(append([]EtcdMember(nil), members...), EtcdMember{m.Name, m.PeerURL()})); err != nil {
		return err
	}
	return c.phases(ctx, m, on, "certs all", "kubeconfig admin", "kubeconfig kubelet", "kubeconfig controller-manager",
		"etcd local", "control-plane apiserver", "control-plane controller-manager")
}

// writeShared writes the shared keys where kubeadm looks for them, as a bootstrap's
// write_files does (keys 0600).
func writeShared(m Machine, shared map[string][]byte) error {
	for _, name := range SharedFiles {
		b, ok := shared[name]
		if !ok {
			return fmt.Errorf("machine %s: shared file %s missing", m.Name, name)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}
		if err := writeFile(m.Path(filepath.Join(PKIDir, name)), b, mode); err != nil {
			return err
		}
	}
	return nil
}

// ReadShared reads the shared keys from a machine that has them.
func ReadShared(m Machine) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range SharedFiles {
		b, err := os.ReadFile(m.Path(filepath.Join(PKIDir, name)))
		if err != nil {
			return nil, fmt.Errorf("shared file of %s: %w", m.Name, err)
		}
		out[name] = b
	}
	return out, nil
}

// phases runs `kubeadm init phase <phase> --config ConfigPath --rootfs <root>` for each phase,
// on the machine's network: kubeadm chroots into the machine's root first, so every path it
// reads and writes is the node's own.
func (c Cluster) phases(ctx context.Context, m Machine, on Runner, phases ...string) error {
	if _, err := os.Stat(c.Kubeadm); err != nil {
		return fmt.Errorf("kubeadm binary: %w (run `make testbin`)", err)
	}
	for _, p := range phases {
		args := append([]string{"init", "phase"}, strings.Fields(p)...)
		args = append(args, "--config", ConfigPath, "--rootfs", m.Root)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err := on.Run(ctx, append([]string{c.Kubeadm}, args...)...)
		cancel()
		if err != nil {
			return fmt.Errorf("kubeadm on %s: %w", m.Name, err)
		}
	}
	return nil
}

// writeConfig writes the kubeadm configuration CAPI's kubeadm bootstrap would write for m.
// joining lists the etcd members (m included) when m joins a running etcd cluster.
func (c Cluster) writeConfig(m Machine, joining []EtcdMember) error {
	if !c.Endpoint.IsValid() || c.Name == "" || c.KubernetesVersion == "" {
		return errors.New("kubeadm cluster: Name, Endpoint and KubernetesVersion are required")
	}
	etcdArgs := ""
	if len(joining) > 0 {
		var ic []string
		for _, j := range joining {
			ic = append(ic, j.Name+"="+j.PeerURL)
		}
		etcdArgs = fmt.Sprintf(`    extraArgs:
    - name: initial-cluster
      value: %s
    - name: initial-cluster-state
      value: existing
`, strings.Join(ic, ","))
	}
	apiArgs := ""
	if len(c.APIServerArgs) > 0 || len(c.CertSANs) > 0 {
		apiArgs = "apiServer:\n"
	}
	if len(c.APIServerArgs) > 0 {
		apiArgs += "  extraArgs:\n"
		for _, a := range c.APIServerArgs {
			apiArgs += fmt.Sprintf("  - name: %s\n    value: %q\n", a.Name, a.Value)
		}
	}
	if len(c.CertSANs) > 0 {
		apiArgs += "  certSANs:\n"
		for _, h := range c.CertSANs {
			apiArgs += fmt.Sprintf("  - %q\n", h)
		}
	}
	cmArgs := ""
	if len(c.ControllerManagerArgs) > 0 {
		cmArgs = "controllerManager:\n  extraArgs:\n"
		for _, a := range c.ControllerManagerArgs {
			cmArgs += fmt.Sprintf("  - name: %s\n    value: %q\n", a.Name, a.Value)
		}
	}
	tokens := ""
	if c.BootstrapToken != "" {
		tokens = fmt.Sprintf("bootstrapTokens:\n- token: %q\n  ttl: 24h0m0s\n  usages: [signing, authentication]\n"+
			"  groups: [\"system:bootstrappers:kubeadm:default-node-token\"]\n", c.BootstrapToken)
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
%[10]slocalAPIEndpoint:
  advertiseAddress: %[1]s
  bindPort: %[2]d
nodeRegistration:
  name: %[3]s
  criSocket: unix:///var/run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %[4]s
kubernetesVersion: %[5]s
controlPlaneEndpoint: %[6]s
certificatesDir: %[7]s
networking:
  dnsDomain: cluster.local
  serviceSubnet: 10.96.0.0/12
  podSubnet: 192.168.0.0/16
%[9]s%[11]setcd:
  local:
    dataDir: /var/lib/etcd
%[8]s`, m.Addr, APIPort, m.Name, c.Name, c.KubernetesVersion, hostPort(c.Endpoint, APIPort), PKIDir, etcdArgs, apiArgs, tokens, cmArgs)
	return writeFile(m.Path(ConfigPath), []byte(cfg), 0o600)
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, mode)
}
