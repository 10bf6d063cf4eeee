package vip

import (
	"net/netip"
	"sort"
	"strings"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// This file is the membership protocol's manager side as pure functions: what the agents
// report, who should be a member, and the next version. docs/design/membership.md states the
// rules; the tests in membership_test.go walk the scenarios.

// agentView is what the manager knows of one node's agent, from its Node.
type agentView struct {
	// nodeFound: the Node exists in the workload cluster.
	nodeFound bool
	// nodeReady: its Ready condition is True.
	nodeReady bool
	// reported: the Node carries a parsable AgentStatus.
	reported bool
	status   agentv1.AgentStatus
	// fresh: the report is younger than Options.StaleAfter.
	fresh bool
}

// dead reports whether the node cannot be expected to answer: its Node is gone or not Ready, or
// its agent stopped reporting.
func (v agentView) dead() bool { return !v.nodeFound || !v.nodeReady || (v.reported && !v.fresh) }

// views maps Node names to what their agents report.
type views map[string]agentView

// acks counts the members of m whose agent reports running version m.Version or newer, and lists
// the others. A report counts even when stale: versions never go back, so a node that once ran
// m.Version runs it or a newer one.
func (vs views) acks(m agentv1.Membership) (acked int, lagging []string) {
	for _, x := range m.Members {
		v := vs[x.Name]
		if v.reported && v.status.MembershipVersion >= m.Version {
			acked++
		} else {
			lagging = append(lagging, x.Name)
		}
	}
	return acked, lagging
}

// majority of n members; 0 for the empty bootstrap membership, which needs no acknowledgement.
func majority(n int) int {
	if n == 0 {
		return 0
	}
	return n/2 + 1
}

// acknowledged reports whether a majority of m's members run m (or newer).
func (vs views) acknowledged(m agentv1.Membership) bool {
	n, _ := vs.acks(m)
	return n >= majority(len(m.Members))
}

// holder returns a member of m, other than except, whose agent reports fresh that it holds the
// VIP (arp) or announces it (bgp); "" when none does. The version it runs does not matter: right
// after a new version is issued the owner still runs the previous one, and still serves.
func (vs views) holder(m agentv1.Membership, except string) string {
	for _, x := range m.Members {
		if x.Name != except && vs[x.Name].serves() {
			return x.Name
		}
	}
	return ""
}

// quiesced reports whether the node is out of the data plane: its agent says so, or it is dead
// and another member holds the VIP (a dead node holds nothing anybody can reach, and the others
// have taken over; scenario 13). Never on time alone.
func (vs views) quiesced(m agentv1.Membership, node string) (bool, string) {
	v := vs[node]
	switch {
	case v.reported && v.fresh && v.status.Quiesced:
		return true, "its agent reports it quiesced"
	case v.dead():
		if h := vs.holder(m, node); h != "" {
			return true, "its node is down and " + h + " serves the VIP"
		}
		return false, "its node is down and no other member reports serving the VIP yet"
	case !v.reported:
		return false, "its agent has not reported yet"
	}
	return false, "waiting for its agent to report it quiesced (" + orText(v.status.Reason, "no reason given") + ")"
}

func orText(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// candidate is one member as the membership sees it.
type candidate struct {
	node    string
	address string
	state   lbv1.TargetState
}

// memberAddress picks the member's IP address for gossip: the controller's choice when it is an
// IP, else the first IP among InternalIP and ExternalIP. DNS names do not qualify.
func memberAddress(m providers.Member) string {
	for _, a := range []string{m.Address, m.Addresses["InternalIP"], m.Addresses["ExternalIP"]} {
		if ip, err := netip.ParseAddr(a); err == nil && a != "" {
			return ip.Unmap().String()
		}
	}
	return ""
}

// candidates lists the members that have a Node and an address, sorted by Node name.
func candidates(members []providers.Member) []candidate {
	var out []candidate
	for _, m := range members {
		addr := memberAddress(m)
		if m.NodeName == "" || addr == "" {
			continue
		}
		out = append(out, candidate{node: m.NodeName, address: addr, state: m.State})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node < out[j].node })
	return out
}

// desired is the member set the membership should converge to: every candidate except members
// that are removed, and members being removed once they are quiesced (make-before-break: a
// member leaves the membership only after it handed the VIP over). A node joins only once its
// agent reported and its Node is Ready: a member that never answers would only raise the quorum.
func desired(cur agentv1.Membership, cands []candidate, vs views) []agentv1.MemberConfig {
	var out []agentv1.MemberConfig
	for _, c := range cands {
		switch c.state {
		case lbv1.TargetRemoved:
			continue
		case lbv1.TargetRemoving:
			if !cur.Has(c.node) {
				continue
			}
			if ok, _ := vs.quiesced(cur, c.node); ok {
				continue
			}
		default:
			if v := vs[c.node]; !cur.Has(c.node) && (!v.reported || v.dead()) {
				continue
			}
		}
		out = append(out, agentv1.MemberConfig{Name: c.node, Address: c.address})
	}
	return out
}

// change describes one membership step, for events and logs.
type change struct {
	verb, node string
}

func (c change) String() string { return c.verb + " " + c.node }

// next returns the membership after at most one change from cur towards want: an address
// update, else an addition (the first wanted node, by name, not yet a member), else a removal.
// Additions go first, as a control plane's rollout adds a Machine before it deletes one; the
// order of members is kept, new ones are appended. ok is false when cur already matches want.
func next(cur agentv1.Membership, want []agentv1.MemberConfig) (agentv1.Membership, change, bool) {
	wantBy := map[string]string{}
	for _, w := range want {
		wantBy[w.Name] = w.Address
	}
	have := map[string]bool{}
	out := agentv1.Membership{Version: cur.Version + 1}
	for _, m := range cur.Members {
		have[m.Name] = true
		if a, ok := wantBy[m.Name]; ok && a != m.Address {
			// The voters stay the same, so any majority of the old list is one of the new.
			out.Members = append([]agentv1.MemberConfig(nil), cur.Members...)
			for i := range out.Members {
				if out.Members[i].Name == m.Name {
					out.Members[i].Address = a
				}
			}
			return out, change{"readdress", m.Name}, true
		}
	}
	for _, w := range want {
		if !have[w.Name] {
			out.Members = append(append([]agentv1.MemberConfig(nil), cur.Members...), w)
			return out, change{"add", w.Name}, true
		}
	}
	for i, m := range cur.Members {
		if _, ok := wantBy[m.Name]; !ok {
			out.Members = append(append([]agentv1.MemberConfig(nil), cur.Members[:i]...), cur.Members[i+1:]...)
			return out, change{"remove", m.Name}, true
		}
	}
	return cur, change{}, false
}

// inRotation reports whether a member's agent runs the current membership as a member and is in
// the data plane.
func (vs views) inRotation(m agentv1.Membership, node string) bool {
	v := vs[node]
	return m.Has(node) && v.reported && v.fresh && !v.dead() && v.status.Member && v.status.InDataPlane &&
		v.status.MembershipVersion >= m.Version
}

// viewOf builds an agentView from a Node's facts.
func viewOf(found, ready bool, annotation string, now time.Time, staleAfter time.Duration) agentView {
	v := agentView{nodeFound: found, nodeReady: ready}
	if annotation == "" {
		return v
	}
	st, err := agentv1.ParseAgentStatus(annotation)
	if err != nil {
		return v
	}
	v.reported, v.status = true, st
	v.fresh = now.Sub(st.UpdatedAt.Time) < staleAfter
	return v
}

func joinNames(ns []string) string {
	if len(ns) > 5 {
		ns = append(ns[:5:5], "...")
	}
	return strings.Join(ns, ", ")
}
