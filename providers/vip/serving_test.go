package vip

import (
	"testing"

	. "github.com/onsi/gomega"
)

// withSessions is a fresh report of a member that announces (bgp) with est of of its routers'
// sessions Established.
func withSessions(est, of int) agentView {
	v := report(1, true, true, true, false)
	v.status.PeersEstablished, v.status.Peers = est, of
	return v
}

// takeOverServer: arp, the holder; bgp, a member that announces with every router's session
// Established, fresh and not quiesced. The one asked about never counts for itself.
func TestTakeOverServer(t *testing.T) {
	stale := withSessions(2, 2)
	stale.fresh = false
	quiesced := withSessions(2, 2)
	quiesced.status.Quiesced = true
	for _, tc := range []struct {
		name   string
		vs     views
		bgp    bool
		except string
		want   string
	}{
		{name: "arp: the holder, sessions or not", vs: views{"a": report(1, true, true, true, false)}, want: "a"},
		{name: "bgp: announcing, no session up", vs: views{"a": withSessions(0, 2)}, bgp: true},
		{name: "bgp: announcing, 1 of 2 up", vs: views{"a": withSessions(1, 2)}, bgp: true},
		{name: "bgp: an agent that reports no sessions", vs: views{"a": withSessions(0, 0)}, bgp: true},
		{name: "bgp: every session up", vs: views{"a": withSessions(1, 2), "b": withSessions(2, 2)}, bgp: true, want: "b"},
		{name: "bgp: sessions up, not announcing", vs: views{"a": func() agentView {
			v := withSessions(2, 2)
			v.status.Holding = false
			return v
		}()}, bgp: true},
		{name: "bgp: a stale report", vs: views{"a": stale}, bgp: true},
		{name: "bgp: quiesced", vs: views{"a": quiesced}, bgp: true},
		{name: "bgp: not itself", vs: views{"a": withSessions(2, 2)}, bgp: true, except: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.vs.takeOverServer(ms(1, "a", "b"), tc.except, tc.bgp)).To(Equal(tc.want))
		})
	}
}

// sessionsText names what a member's report shows, for the condition message.
func TestSessionsText(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    agentView
		want string
	}{
		{"no report", agentView{nodeFound: true, nodeReady: true}, "n has not reported"},
		{"down", agentView{nodeFound: true, reported: true, fresh: true}, "n is down or its report is stale"},
		{"withdrawn", report(1, true, false, false, false), "n does not announce the VIP"},
		{"no sessions reported", withSessions(0, 0), "n reports no BGP session"},
		{"counts", withSessions(1, 2), "n has 1 of 2 Established"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tc.v.sessionsText("n")).To(Equal(tc.want))
		})
	}
}
