//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/testinfra"
)

// The lab's quiesce settings: the sample's drain (10 s) shortened so a rollout of three
// Machines takes seconds, not minutes; still longer than a request.
const labDrainPeriod = 2 * time.Second

// sampleFile is the sample the lab runs behind backend.
func sampleFile(backend Backend) string {
	if backend == BGP {
		return "cluster_kubeadm_bgp.yaml"
	}
	return "cluster_kubeadm_arp_ipam.yaml"
}

// SampleBusyDrain is the agent's busyDrain in backend's sample: what the real control plane's
// lab renders (the stand-ins leave it out, see CreateCluster).
func SampleBusyDrain(backend Backend) (time.Duration, error) {
	lb, _, err := lab.SampleObjects(sampleFile(backend), "default")
	if err != nil {
		return 0, err
	}
	if v := lb.Spec.Backend.VIP(); v != nil && v.Agent.Timers != nil && v.Agent.Timers.BusyDrain != nil {
		return v.Agent.Timers.BusyDrain.Duration, nil
	}
	return 0, nil
}

// CreateCluster creates the Cluster (its control plane: the Machines with the control-plane
// label), its kubeconfig Secret pointing at the workload API server, and the sample's
// LoadBalancer with its VIP from the lab's pool. It returns the LoadBalancer.
func (l *Lab) CreateCluster(ctx context.Context) (*lbv1.LoadBalancer, error) {
	return l.createCluster(ctx, true)
}

// createCluster is CreateCluster; publish false makes the sample's LoadBalancer an additional
// endpoint (spec.publishClusterEndpoint false), another one publishing the Cluster's.
func (l *Lab) createCluster(ctx context.Context, publish bool) (*lbv1.LoadBalancer, error) {
	lb, secrets, err := lab.SampleObjects(sampleFile(l.opts.Backend), l.Namespace)
	if err != nil {
		return nil, err
	}
	if !publish {
		lb.Spec.PublishClusterEndpoint = ptr(false)
	}
	drain := lbv1.Duration{Duration: labDrainPeriod}
	lb.Spec.Quiesce.DrainPeriod = &drain
	if v := lb.Spec.Backend.VIP(); v != nil && v.Agent.Timers != nil && l.real == nil {
		// The stand-ins apply the sample's goaway-chance, so the kept-alive prober leaves a
		// drained member within about a second, as client-go leaves kube-apiserver. busyDrain
		// is left out to keep the lab's hand-overs (ARP) and withdrawals (BGP) at the drain:
		// the real-control-plane lab runs the sample's. Without the GOAWAY, the kept-alive
		// prober was still on the member when the drain's reset came, and one CI run lost a
		// GET whose HEADERS had arrived and whose body had not.
		v.Agent.Timers.BusyDrain = nil
	}
	if b := lb.Spec.Backend.BGP; b != nil {
		// The lab has one router (the sample two) and takes the VIP from its pool, as the ARP
		// sample does; the first peer keeps the sample's password.
		lb.Spec.Endpoint = lbv1.APIEndpoint{}
		b.AddressFrom = &lbv1.AddressFrom{PoolRef: lbv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "vips"}}
		b.Peers = b.Peers[:1]
		b.Peers[0].Address = routerAddr.String()
		b.Peers[0].ASN = routerASN
		b.ASN = nodeASN
	}
	for _, s := range secrets {
		if err := l.Mgmt.Client.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.ClusterName},
		Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
			Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}}}},
	}
	if err := l.Mgmt.Client.Create(ctx, c); err != nil {
		return nil, fmt.Errorf("creating Cluster: %w", err)
	}
	if l.real == nil {
		// A real control plane's kubeconfig comes once the endpoint is known, as KCP writes it.
		if err := l.Mgmt.Client.Create(ctx, kubeconfig.GenerateSecret(c, kubeconfig.FromEnvTestConfig(l.Workload.Config, c))); err != nil {
			return nil, fmt.Errorf("creating the workload kubeconfig Secret: %w", err)
		}
	}
	if err := l.Mgmt.Client.Create(ctx, lb); err != nil {
		return nil, fmt.Errorf("creating LoadBalancer: %w", err)
	}
	return lb, nil
}

// WaitEndpoint waits until the Cluster's controlPlaneEndpoint is published and returns the VIP.
func (l *Lab) WaitEndpoint(ctx context.Context, timeout time.Duration) (netip.Addr, error) {
	err := harness.Poll(ctx, timeout, "the Cluster's endpoint", func(ctx context.Context) (bool, string, error) {
		c := &clusterv1.Cluster{}
		if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, c); err != nil {
			return false, "", err
		}
		a, err := netip.ParseAddr(c.Spec.ControlPlaneEndpoint.Host)
		if err != nil {
			return false, fmt.Sprintf("endpoint %q", c.Spec.ControlPlaneEndpoint.Host), nil
		}
		l.vip = a
		return true, "", nil
	})
	if err == nil && l.real != nil && l.real.shared == nil {
		err = l.setUpRealCP(ctx)
	}
	return l.vip, err
}

// VIP is the published endpoint address (after WaitEndpoint).
func (l *Lab) VIP() netip.Addr { return l.vip }

// CreateMachine creates a control-plane Machine and its TestMachine, as KubeadmControlPlane
// does: the lab's provider boots it once the bootstrap Secret exists.
func (l *Lab) CreateMachine(ctx context.Context, name string) (*clusterv1.Machine, error) {
	if l.opts.Bootstrap == CAPIBootstrap {
		return l.createCABPKMachine(ctx, name)
	}
	return l.createMachine(ctx, name, l.ClusterName+"-caplb-agent")
}

// createMachine creates a control-plane Machine booting from the bootstrap Secret secret.
func (l *Lab) createMachine(ctx context.Context, name, secret string) (*clusterv1.Machine, error) {
	return l.createMachineWith(ctx, name, clusterv1.Bootstrap{DataSecretName: ptr(secret)}, "")
}

// createMachineWith creates a control-plane Machine with bootstrap (and version, if set) and
// its TestMachine.
func (l *Lab) createMachineWith(ctx context.Context, name string, bootstrap clusterv1.Bootstrap, version string) (*clusterv1.Machine, error) {
	tm := testinfra.NewMachine(l.Namespace, name, testinfra.MachineSpec{NodeName: name})
	if err := l.Mgmt.Client.Create(ctx, tm); err != nil {
		return nil, fmt.Errorf("creating TestMachine %s: %w", name, err)
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: name, Labels: map[string]string{
			clusterv1.ClusterNameLabel: l.ClusterName, clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{
			ClusterName: l.ClusterName,
			Bootstrap:   bootstrap,
			Version:     version,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: testinfra.Group, Kind: testinfra.MachineKind, Name: name},
		},
	}
	if l.real != nil {
		m.Annotations = map[string]string{kcpCleanupHook: ""}
	}
	if err := l.Mgmt.Client.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating Machine %s: %w", name, err)
	}
	return m, nil
}

func ptr[T any](v T) *T { return &v }

// LB reads the LoadBalancer.
func (l *Lab) LB(ctx context.Context, name string) (*lbv1.LoadBalancer, error) {
	lb := &lbv1.LoadBalancer{}
	return lb, l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: name}, lb)
}

// Machines lists the cluster's Machines.
func (l *Lab) Machines(ctx context.Context) ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := l.Mgmt.Client.List(ctx, list, client.InNamespace(l.Namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Node returns the running lab machine called name, or nil.
func (l *Lab) Node(name string) *Node { return l.infra.node(name) }

// Nodes lists the running lab machines.
func (l *Lab) Nodes() []*Node { return l.infra.running() }

// sampleGoawayChance returns the sample's kube-apiserver --goaway-chance ("" when it sets none).
func sampleGoawayChance(sample string) (string, error) {
	args, err := kubeadm.SampleAPIServerArgs(sample)
	if err != nil {
		return "", err
	}
	for _, a := range args {
		if a.Name == "goaway-chance" {
			return a.Value, nil
		}
	}
	return "", nil
}
