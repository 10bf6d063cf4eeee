package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/testinfra"
)

// ClusterOptions shapes a test Cluster.
type ClusterOptions struct {
	// Endpoint presets spec.controlPlaneEndpoint (e.g. to test that caplb never overwrites it).
	Endpoint clusterv1.APIEndpoint
	// Paused sets spec.paused.
	Paused bool
	// Labels are set on the Cluster (e.g. for a LoadBalancerClass's clusterSelector).
	Labels map[string]string
	// ExternallyManaged gives the Cluster a TestCluster infrastructure carrying
	// cluster.x-k8s.io/managed-by, which nothing reconciles: CAPI waits until the test marks
	// it provisioned (testinfra.SetProvisioned). No kubeconfig Secret is created: the external
	// tool supplies it (Workload.CreateKubeconfigSecret).
	ExternallyManaged bool
}

// CreateCluster creates a Cluster with no infrastructureRef (so CAPI marks its infrastructure
// provisioned at once) and no controlPlaneRef (so its control plane is the Machines carrying
// the control-plane label), and the <name>-kubeconfig Secret that makes the same API server
// its workload cluster.
func (e *Env) CreateCluster(ctx context.Context, namespace, name string, o ClusterOptions) (*clusterv1.Cluster, error) {
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: o.Labels},
		Spec: clusterv1.ClusterSpec{
			// spec is required and a typed empty one is omitted: give it a pod network.
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
			},
			ControlPlaneEndpoint: o.Endpoint,
		},
	}
	if o.Paused {
		c.Spec.Paused = ptr.To(true)
	}
	if o.ExternallyManaged {
		if err := e.Client.Create(ctx, testinfra.NewExternallyManagedCluster(namespace, name, "caplb-test")); err != nil {
			return nil, fmt.Errorf("creating TestCluster %s/%s: %w", namespace, name, err)
		}
		c.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{
			APIGroup: testinfra.Group, Kind: testinfra.ClusterKind, Name: name,
		}
	}
	if err := e.Client.Create(ctx, c); err != nil {
		return nil, fmt.Errorf("creating Cluster %s/%s: %w", namespace, name, err)
	}
	if o.ExternallyManaged {
		return c, nil
	}
	if err := e.CreateKubeconfigSecret(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

// CreateKubeconfigSecret creates the <cluster>-kubeconfig Secret pointing at the test API
// server, which CAPI's ClusterCache uses to reach the "workload cluster" (for Nodes). It is a
// no-op when the Secret exists.
func (e *Env) CreateKubeconfigSecret(ctx context.Context, c *clusterv1.Cluster) error {
	if c.UID == "" {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return fmt.Errorf("reading Cluster %s: %w", client.ObjectKeyFromObject(c), err)
		}
	}
	s := kubeconfig.GenerateSecret(c, kubeconfig.FromEnvTestConfig(e.Config, c))
	if err := e.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating kubeconfig Secret for Cluster %s: %w", c.Name, err)
	}
	return nil
}

// MachineOptions shapes a test Machine.
type MachineOptions struct {
	// Addresses the infrastructure reports for the Machine (and its Node).
	Addresses []clusterv1.MachineAddress
	// Worker leaves out the control-plane label.
	Worker bool
	// Labels and Annotations are added to the Machine.
	Labels, Annotations map[string]string
	// NodeLabels are added to the Machine's Node.
	NodeLabels map[string]string
	// NoNode: the Machine never gets a Node (and so no nodeRef): it never joins.
	NoNode bool
	// KubeadmConfig, when set, names the Machine's bootstrap config (a KubeadmConfig in its
	// namespace, which CABPK renders: CAPIOptions.KubeadmBootstrap) instead of a ready
	// dataSecretName; Version is then the Machine's Kubernetes version.
	KubeadmConfig, Version string
}

// CreateMachine creates a TestMachine and a Machine of cluster pointing at it, bootstrapped
// through spec.bootstrap.dataSecretName (no bootstrap provider needed). CAPI's Machine
// reconciler and the test infrastructure provider take it from there: provisioned, a Node, a
// nodeRef, Ready.
func (e *Env) CreateMachine(ctx context.Context, cluster *clusterv1.Cluster, name string, o MachineOptions) (*clusterv1.Machine, error) {
	tm := testinfra.NewMachine(cluster.Namespace, name, testinfra.MachineSpec{
		Addresses: o.Addresses, NodeLabels: o.NodeLabels, NoNode: o.NoNode,
	})
	if err := e.Client.Create(ctx, tm); err != nil {
		return nil, fmt.Errorf("creating TestMachine %s/%s: %w", cluster.Namespace, name, err)
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	if !o.Worker {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	for k, v := range o.Labels {
		labels[k] = v
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace, Name: name, Labels: labels, Annotations: o.Annotations,
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: testinfra.Group, Kind: testinfra.MachineKind, Name: name,
			},
		},
	}
	if o.KubeadmConfig != "" {
		m.Spec.Bootstrap = clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: o.KubeadmConfig}}
		m.Spec.Version = o.Version
	}
	if err := e.Client.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating Machine %s/%s: %w", cluster.Namespace, name, err)
	}
	return m, nil
}

// CreateControlPlane creates n control-plane Machines named <cluster>-cp-<i>; addrs(i) gives
// the addresses of the i-th (nil for none).
func (e *Env) CreateControlPlane(ctx context.Context, cluster *clusterv1.Cluster, n int,
	addrs func(i int) []clusterv1.MachineAddress) ([]*clusterv1.Machine, error) {
	out := make([]*clusterv1.Machine, 0, n)
	for i := range n {
		var a []clusterv1.MachineAddress
		if addrs != nil {
			a = addrs(i)
		}
		m, err := e.CreateMachine(ctx, cluster, fmt.Sprintf("%s-cp-%d", cluster.Name, i), MachineOptions{Addresses: a})
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// InternalIP returns a one-address list, for MachineOptions.Addresses.
func InternalIP(ip string) []clusterv1.MachineAddress {
	return []clusterv1.MachineAddress{{Type: clusterv1.MachineInternalIP, Address: ip}}
}

// MachineReady reports whether CAPI has given the Machine a nodeRef and a Ready condition.
func MachineReady(m *clusterv1.Machine) bool {
	if !m.Status.NodeRef.IsDefined() {
		return false
	}
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.ReadyCondition {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// CreateNode registers a Ready Node directly (for standalone, Node-target LoadBalancers, where
// no CAPI Machine is involved).
func (e *Env) CreateNode(ctx context.Context, name string, labels map[string]string, internalIP string) (*corev1.Node, error) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := e.Client.Create(ctx, n); err != nil {
		return nil, fmt.Errorf("creating Node %s: %w", name, err)
	}
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
	if err := testinfra.SetNodeReady(ctx, e.Client, n, true, addrs); err != nil {
		return nil, err
	}
	return n, nil
}
