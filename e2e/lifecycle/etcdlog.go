//go:build linux

package lifecycle

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// sampleEtcd records the etcd membership (names, learner or voter, the leader) into rec every
// interval until ctx ends, read as KCP reads it: an etcd client with a control-plane machine's
// credentials over the running machines' client URLs, dialling from the client's namespace
// (a machine's own namespace goes when the machine is deleted). The recorder keeps changes
// only. Before the first control-plane machine runs there is nothing to read.
func (l *Lab) sampleEtcd(ctx context.Context, rec *observe.Recorder, interval time.Duration) {
	var e *kubeadm.Etcd
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	var endpoints []string
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var machines []kubeadm.Machine
		for _, n := range l.Nodes() {
			if n.cp != nil {
				machines = append(machines, n.cp.Machine)
			}
		}
		slices.SortFunc(machines, func(a, b kubeadm.Machine) int { return strings.Compare(a.Name, b.Name) })
		eps := make([]string, 0, len(machines))
		for _, m := range machines {
			eps = append(eps, m.ClientURL())
		}
		if len(eps) > 0 {
			var err error
			switch {
			case e == nil:
				e, err = kubeadm.NewEtcd(machines[0], l.topo.client.DialContext, eps...)
			case !slices.Equal(eps, endpoints):
				e.SetEndpoints(eps...)
			}
			if err == nil {
				endpoints = eps
				at := time.Now()
				members, leader, err := membership(ctx, e)
				if ctx.Err() != nil {
					return
				}
				rec.Etcd(at, etcdMembers(members, leader, l.real.peerName), err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func membership(ctx context.Context, e *kubeadm.Etcd) ([]kubeadm.Member, uint64, error) {
	members, err := e.Members(ctx)
	if err != nil {
		return nil, 0, err
	}
	leader, err := e.Leader(ctx)
	return members, leader, err
}

// etcdMembers is the membership as the timeline draws it: a learner that has not started yet
// has no name in etcd's list, so it is named after the machine whose peer URL it has (nameOf;
// the machine is still booting, not yet among the lab's nodes).
func etcdMembers(members []kubeadm.Member, leader uint64, nameOf func(peerURL string) string) []observe.EtcdMember {
	out := make([]observe.EtcdMember, 0, len(members))
	for _, m := range members {
		name := m.Name
		if name == "" {
			name = nameOf(m.PeerURL)
		}
		if name == "" {
			name = m.PeerURL
		}
		out = append(out, observe.EtcdMember{Name: name, Learner: m.Learner, Leader: leader != 0 && m.ID == leader})
	}
	return out
}
