package testinfra

import (
	"testing"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func TestNewMachineRoundTrip(t *testing.T) {
	g := NewWithT(t)
	addrs := []clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: "127.0.0.2"},
		{Type: clusterv1.MachineExternalIP, Address: "192.0.2.10"},
	}
	tm := NewMachine("ns", "m", MachineSpec{Addresses: addrs, NodeLabels: map[string]string{"a": "b"}})
	g.Expect(tm.GroupVersionKind()).To(Equal(MachineGVK))
	got, err := Addresses(tm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(addrs))
	g.Expect(NodeName(tm)).To(Equal("ns-m"))
	g.Expect(ProviderID("ns", "m")).To(Equal("caplb-test://ns/m"))

	tm = NewMachine("ns", "m", MachineSpec{NodeName: "node-1"})
	g.Expect(NodeName(tm)).To(Equal("node-1"))
	got, err = Addresses(tm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
}

func TestAddressesRejectsIncompleteEntries(t *testing.T) {
	g := NewWithT(t)
	tm := NewMachine("ns", "m", MachineSpec{})
	tm.Object["spec"] = map[string]any{"addresses": []any{map[string]any{"type": "InternalIP"}}}
	_, err := Addresses(tm)
	g.Expect(err).To(MatchError(ContainSubstring("spec.addresses[0]")))
}
