//go:build linux

package lifecycle

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

func TestEtcdMembers(t *testing.T) {
	cp1 := kubeadm.Machine{Name: "cp-1", Addr: netip.MustParseAddr("10.44.0.11")}
	cp2 := kubeadm.Machine{Name: "cp-2", Addr: netip.MustParseAddr("10.44.0.12")}
	nameOf := func(url string) string {
		for _, m := range []kubeadm.Machine{cp1, cp2} {
			if m.PeerURL() == url {
				return m.Name
			}
		}
		return ""
	}
	for _, tc := range []struct {
		name    string
		members []kubeadm.Member
		leader  uint64
		want    []observe.EtcdMember
	}{
		{"the leader marked, voters and learners apart",
			[]kubeadm.Member{{ID: 1, Name: "cp-1", PeerURL: cp1.PeerURL()}, {ID: 2, Name: "cp-2", PeerURL: cp2.PeerURL(), Learner: true}}, 1,
			[]observe.EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2", Learner: true}}},
		{"a learner not started yet is named after its machine's peer URL",
			[]kubeadm.Member{{ID: 1, Name: "cp-1", PeerURL: cp1.PeerURL()}, {ID: 2, PeerURL: cp2.PeerURL(), Learner: true}}, 1,
			[]observe.EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2", Learner: true}}},
		{"a member no machine has: its peer URL",
			[]kubeadm.Member{{ID: 3, PeerURL: "https://10.44.0.99:2380"}}, 3,
			[]observe.EtcdMember{{Name: "https://10.44.0.99:2380", Leader: true}}},
		{"no leader (an election): nobody leads",
			[]kubeadm.Member{{ID: 1, Name: "cp-1", PeerURL: cp1.PeerURL()}, {ID: 2, Name: "cp-2", PeerURL: cp2.PeerURL()}}, 0,
			[]observe.EtcdMember{{Name: "cp-1"}, {Name: "cp-2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(etcdMembers(tc.members, tc.leader, nameOf)).To(Equal(tc.want))
		})
	}
}
