//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/cloudinit"
)

// Bootstrap is who renders a real control-plane machine's bootstrap data.
type Bootstrap string

const (
	// LabBootstrap: the lab writes kubeadm's configuration and the cluster's keys itself beside
	// the sample's files (resolved from caplb's agent Secret).
	LabBootstrap Bootstrap = "lab"
	// CAPIBootstrap: CAPI's own kubeadm bootstrap provider (CABPK) renders each control-plane
	// Machine's cloud-init from a KubeadmConfig made of the shipped sample's kubeadmConfigSpec,
	// as KubeadmControlPlane makes it; the machine boots from that data alone: its files as
	// written, kubeadm from the configuration CABPK wrote (bootFromCloudInit).
	CAPIBootstrap Bootstrap = "capi"
)

// BootstrapFromEnv reads CAPLB_LAB_BOOTSTRAP ("lab" or "capi"; empty: def).
func BootstrapFromEnv(def Bootstrap) (Bootstrap, error) {
	switch v := Bootstrap(os.Getenv("CAPLB_LAB_BOOTSTRAP")); v {
	case "":
		return def, nil
	case LabBootstrap, CAPIBootstrap:
		return v, nil
	default:
		return "", fmt.Errorf("CAPLB_LAB_BOOTSTRAP=%q: use %q or %q", v, LabBootstrap, CAPIBootstrap)
	}
}

// What the lab's machines are given by their infrastructure, not by the sample: the sample is
// infrastructure-neutral, a user's machine template adds these (here as the cloud's
// datasource offers them, rendered at boot by cloud-init's jinja).
const (
	nodeNameFromDatasource    = "{{ ds.meta_data.local_hostname }}"
	advertiseFromDatasource   = "{{ ds.meta_data.local_ipv4 }}"
	containerdSocket          = "unix:///var/run/containerd/containerd.sock"
	labControllerManagerFlags = "bootstrapsigner,tokencleaner"
	// initializedTimeout bounds the wait for the Cluster's ControlPlaneInitialized before a
	// joining Machine is made (KCP scales up only then).
	initializedTimeout = 2 * time.Minute
)

// cabpkConfig builds a control-plane Machine's KubeadmConfig from the sample's
// kubeadmConfigSpec as KubeadmControlPlane does (the first Machine's with its
// InitConfiguration, the others' with a JoinConfiguration for the control plane), plus what the
// lab's infrastructure adds: the node's name and advertise address from the datasource, the
// container runtime's socket, and kube-controller-manager's controllers kept to what joins
// need (the bootstrap signer for kubeadm's discovery, the token cleaner).
func (l *Lab) cabpkConfig(name string, join bool) (*bootstrapv1.KubeadmConfig, string, error) {
	kcp, err := lab.SampleKubeadmControlPlane(sampleFile(l.opts.Backend))
	if err != nil {
		return nil, "", err
	}
	spec := kcp.Spec.KubeadmConfigSpec.DeepCopy()
	endpoint := bootstrapv1.APIEndpoint{AdvertiseAddress: advertiseFromDatasource, BindPort: apiPort}
	if join {
		spec.InitConfiguration = bootstrapv1.InitConfiguration{}
		fillNodeRegistration(&spec.JoinConfiguration.NodeRegistration)
		if spec.JoinConfiguration.ControlPlane == nil {
			spec.JoinConfiguration.ControlPlane = &bootstrapv1.JoinControlPlane{LocalAPIEndpoint: endpoint}
		}
	} else {
		spec.JoinConfiguration = bootstrapv1.JoinConfiguration{}
		fillNodeRegistration(&spec.InitConfiguration.NodeRegistration)
		if spec.InitConfiguration.LocalAPIEndpoint.AdvertiseAddress == "" {
			spec.InitConfiguration.LocalAPIEndpoint = endpoint
		}
	}
	cm := &spec.ClusterConfiguration.ControllerManager
	if !slices.ContainsFunc(cm.ExtraArgs, func(a bootstrapv1.Arg) bool { return a.Name == "controllers" }) {
		cm.ExtraArgs = append(cm.ExtraArgs, bootstrapv1.Arg{Name: "controllers", Value: ptr(labControllerManagerFlags)})
	}
	cfg := &bootstrapv1.KubeadmConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: l.ClusterName, clusterv1.MachineControlPlaneLabel: ""}},
		Spec: *spec,
	}
	return cfg, kcp.Spec.Version, nil
}

func fillNodeRegistration(n *bootstrapv1.NodeRegistrationOptions) {
	if n.Name == "" {
		n.Name = nodeNameFromDatasource
	}
	if n.CRISocket == "" {
		n.CRISocket = containerdSocket
	}
}

// createCABPKMachine creates a control-plane Machine whose bootstrap is a KubeadmConfig
// (cabpkConfig): an init while the Cluster's control plane is not initialized and no other
// control-plane Machine exists; else — once the Cluster is initialized, as KCP waits — a join.
func (l *Lab) createCABPKMachine(ctx context.Context, name string) (*clusterv1.Machine, error) {
	ms, err := l.Machines(ctx)
	if err != nil {
		return nil, err
	}
	join := len(ms) > 0
	if join {
		if err := l.waitControlPlaneInitialized(ctx); err != nil {
			return nil, err
		}
	}
	cfg, version, err := l.cabpkConfig(name, join)
	if err != nil {
		return nil, err
	}
	if err := l.Mgmt.Client.Create(ctx, cfg); err != nil {
		return nil, fmt.Errorf("creating KubeadmConfig %s: %w", name, err)
	}
	return l.createMachineWith(ctx, name, clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
		APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: cfg.Name}}, version)
}

// waitControlPlaneInitialized waits for CAPI's Cluster controller to mark the control plane
// initialized: CABPK renders joins only then (a join's KubeadmConfig reconciled earlier waits
// behind the init lock for 30 s).
func (l *Lab) waitControlPlaneInitialized(ctx context.Context) error {
	return harness.Poll(ctx, initializedTimeout, "the Cluster's control plane initialized", func(ctx context.Context) (bool, string, error) {
		c := &clusterv1.Cluster{}
		if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, c); err != nil {
			return false, "", err
		}
		// The condition CABPK reads (for a Cluster without a control plane object CAPI sets it
		// once a control-plane Machine has a Node).
		return conditions.IsTrue(c, clusterv1.ClusterControlPlaneInitializedCondition), "condition ControlPlaneInitialized not true", nil
	})
}

// cabpkSecret is the bootstrap data Secret CAPI copied onto the TestMachine's Machine (false
// while CABPK has not rendered it).
func (r *infra) cabpkSecret(ctx context.Context, namespace string, owners []metav1.OwnerReference) (string, bool, error) {
	for _, ref := range owners {
		if ref.Kind != "Machine" {
			continue
		}
		m := &clusterv1.Machine{}
		if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, m); err != nil {
			return "", false, client.IgnoreNotFound(err)
		}
		if s := m.Spec.Bootstrap.DataSecretName; s != nil && *s != "" {
			return *s, true, nil
		}
	}
	return "", false, nil
}

// bootFromCloudInit does what cloud-init does with CABPK's data on a lab machine: renders it
// with the machine's metadata (its name and address), writes every file with its mode, and
// returns the kubeadm command for bootRealCP to run. The commands around kubeadm cannot run on
// a lab machine (it has no shell or tools of its own in its root): the sample's
// preKubeadmCommands are let through (the caller logs them as not run — the one the sample
// ships pins the kubelet's node IP, which the lab's kubelet takes from the machine's address
// anyway), anything else is refused rather than skipped unseen.
func (d *nodeDeps) bootFromCloudInit(n *Node, secret *corev1.Secret) (*cloudinit.KubeadmStep, error) {
	if f := string(secret.Data["format"]); f != "cloud-config" {
		return nil, fmt.Errorf("bootstrap data Secret %s: format %q, want cloud-config", secret.Name, f)
	}
	data, err := cloudinit.Render(secret.Data["value"], cloudinit.MetaData{"local_hostname": n.Name, "local_ipv4": n.Addr.String()})
	if err != nil {
		return nil, err
	}
	cfg, err := cloudinit.Parse(data)
	if err != nil {
		return nil, err
	}
	step, err := cfg.Kubeadm()
	if err != nil {
		return nil, err
	}
	if pre := cfg.Commands[:step.Index]; !slices.Equal(pre, d.samplePreKubeadm) {
		return nil, fmt.Errorf("bootstrap data Secret %s: commands before kubeadm %q are not the sample's preKubeadmCommands %q: the lab cannot run them",
			secret.Name, pre, d.samplePreKubeadm)
	}
	if post := cfg.Commands[step.Index+1:]; len(post) > 0 {
		return nil, fmt.Errorf("bootstrap data Secret %s: commands after kubeadm %q: the lab cannot run them", secret.Name, post)
	}
	for _, f := range cfg.Files {
		if f.Owner != "" && f.Owner != "root:root" && f.Owner != "root" {
			return nil, fmt.Errorf("bootstrap data Secret %s: %s is owned by %q: a lab machine has root only", secret.Name, f.Path, f.Owner)
		}
		if f.Append {
			return nil, fmt.Errorf("bootstrap data Secret %s: %s appends, which the lab does not do", secret.Name, f.Path)
		}
		if err := lab.WriteMachineFile(filepath.Join(n.Root, f.Path), f.Content, f.Mode); err != nil {
			return nil, err
		}
	}
	return &step, nil
}

// bootstrapSucceeded writes CABPK's sentinel, as its command does after kubeadm.
func (n *Node) bootstrapSucceeded() error {
	return writeFile(filepath.Join(n.Root, cloudinit.SentinelFile), []byte("success\n"), 0o644)
}
