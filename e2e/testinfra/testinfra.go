// Package testinfra is a minimal Cluster API infrastructure provider for caplb's integration
// tests, demo and benchmarks. Its one kind, TestMachine (group infrastructure.caplb.test,
// contract v1beta2), is what a Machine's spec.infrastructureRef points at; its Reconciler
// plays two parts a real installation splits between a cloud and a kubelet:
//
//   - the infrastructure provider: it fills spec.providerID, sets
//     status.initialization.provisioned and copies spec.addresses to status.addresses;
//   - the kubelet: it registers a Ready Node with the same providerID in the workload cluster,
//     which is how CAPI's Machine reconciler comes to set status.nodeRef. Without a nodeRef
//     CAPI skips pre-drain hooks, so this part is what lets the tests exercise caplb's hook.
//
// TestMachines are served as unstructured objects: the kind is small and only tests use it.
package testinfra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/envtest"
)

const (
	// Group is the API group of the test infrastructure kinds.
	Group = "infrastructure.caplb.test"
	// Version is the only served version; the CRD's contract label maps CAPI v1beta2 to it.
	Version = "v1alpha1"
	// MachineKind is the infrastructure-machine kind.
	MachineKind = "TestMachine"
	// ClusterKind is the infrastructure-cluster kind of externally managed test clusters: no
	// reconciler serves it (see NewExternallyManagedCluster).
	ClusterKind = "TestCluster"
	// ProviderIDPrefix starts every providerID the test provider assigns.
	ProviderIDPrefix = "caplb-test://"
)

// MachineGVK is the GroupVersionKind of TestMachine.
var MachineGVK = schema.GroupVersionKind{Group: Group, Version: Version, Kind: MachineKind}

// ClusterGVK is the GroupVersionKind of TestCluster.
var ClusterGVK = schema.GroupVersionKind{Group: Group, Version: Version, Kind: ClusterKind}

// NewExternallyManagedCluster returns a TestCluster carrying CAPI's
// cluster.x-k8s.io/managed-by annotation: infrastructure that some other tool built and
// maintains. CAPI waits for its status.initialization.provisioned, which that tool (the test)
// sets with SetProvisioned.
func NewExternallyManagedCluster(namespace, name, managedBy string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ClusterGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetAnnotations(map[string]string{clusterv1.ManagedByAnnotation: managedBy})
	u.Object["spec"] = map[string]any{}
	return u
}

// SetProvisioned sets a TestCluster's status.initialization.provisioned, as the tool that
// manages it would once its infrastructure is up.
func SetProvisioned(ctx context.Context, c client.Client, namespace, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ClusterGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		return fmt.Errorf("reading TestCluster %s/%s: %w", namespace, name, err)
	}
	base := u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, true, "status", "initialization", "provisioned"); err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, u, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("marking TestCluster %s/%s provisioned: %w", namespace, name, err)
	}
	return nil
}

// CRDDir returns the directory holding the TestMachine CRD, for envtest.Options.ExtraCRDPaths.
func CRDDir() (string, error) {
	root, err := envtest.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("locating the test infrastructure CRD: %w", err)
	}
	dir := filepath.Join(root, "e2e", "testinfra", "crd")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("test infrastructure CRD directory: %w", err)
	}
	return dir, nil
}

// MachineSpec is what a test asks of a TestMachine.
type MachineSpec struct {
	// Addresses the provider reports (status.addresses, the Node's addresses).
	Addresses []clusterv1.MachineAddress
	// NodeName overrides the Node's name (default <namespace>-<name>).
	NodeName string
	// NodeLabels are added to the Node.
	NodeLabels map[string]string
	// NoNode: the machine never joins (no Node, so CAPI never sets a nodeRef).
	NoNode bool
}

// NewMachine returns a TestMachine to create.
func NewMachine(namespace, name string, spec MachineSpec) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(MachineGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	s := map[string]any{}
	if len(spec.Addresses) > 0 {
		s["addresses"] = addressesToList(spec.Addresses)
	}
	if spec.NodeName != "" {
		s["nodeName"] = spec.NodeName
	}
	if spec.NoNode {
		s["noNode"] = true
	}
	if len(spec.NodeLabels) > 0 {
		labels := map[string]any{}
		for k, v := range spec.NodeLabels {
			labels[k] = v
		}
		s["nodeLabels"] = labels
	}
	u.Object["spec"] = s
	return u
}

// NodeName is the name of the Node the test kubelet registers for a TestMachine.
func NodeName(tm *unstructured.Unstructured) string {
	if n, _, _ := unstructured.NestedString(tm.Object, "spec", "nodeName"); n != "" {
		return n
	}
	return tm.GetNamespace() + "-" + tm.GetName()
}

// ProviderID is the providerID the test provider assigns to a TestMachine that has none.
func ProviderID(namespace, name string) string {
	return ProviderIDPrefix + namespace + "/" + name
}

// Addresses reads spec.addresses.
func Addresses(tm *unstructured.Unstructured) ([]clusterv1.MachineAddress, error) {
	raw, found, err := unstructured.NestedSlice(tm.Object, "spec", "addresses")
	if err != nil || !found {
		return nil, err
	}
	out := make([]clusterv1.MachineAddress, 0, len(raw))
	for i, item := range raw {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("spec.addresses[%d] is %T, not an object", i, item)
		}
		typ, _ := m["type"].(string)
		addr, _ := m["address"].(string)
		if typ == "" || addr == "" {
			return nil, fmt.Errorf("spec.addresses[%d] needs type and address", i)
		}
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineAddressType(typ), Address: addr})
	}
	return out, nil
}

func addressesToList(addrs []clusterv1.MachineAddress) []any {
	out := make([]any, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, map[string]any{"type": string(a.Type), "address": a.Address})
	}
	return out
}

// nodeAddresses maps machine address types onto the Node's (the names match for IPs and DNS).
func nodeAddresses(addrs []clusterv1.MachineAddress) []corev1.NodeAddress {
	out := make([]corev1.NodeAddress, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return out
}
