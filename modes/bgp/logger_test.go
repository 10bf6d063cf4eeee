package bgp

import (
	"testing"

	. "github.com/onsi/gomega"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

func TestGobgpLoggerClassifies(t *testing.T) {
	tests := []struct {
		name     string
		msg      string
		fields   gobgplog.Fields
		kind     string
		contains []string
	}{
		{"bad peer AS from the router", "received notification",
			gobgplog.Fields{"Key": "10.0.0.1", "Code": uint8(bgp.BGP_ERROR_OPEN_MESSAGE_ERROR), "Subcode": uint8(bgp.BGP_ERROR_SUB_BAD_PEER_AS)},
			"notification_received", []string{"peer sent NOTIFICATION", "bad peer as", "code 2/2", "make bgp.asn match"}},
		{"we reject the peer's AS", "sent notification",
			gobgplog.Fields{"Key": "10.0.0.1", "Code": uint8(bgp.BGP_ERROR_OPEN_MESSAGE_ERROR), "Subcode": uint8(bgp.BGP_ERROR_SUB_BAD_PEER_AS)},
			"notification_sent", []string{"sent NOTIFICATION", "not bgp.peers[].asn"}},
		{"md5 mismatch looks like a timeout", "failed to connect",
			gobgplog.Fields{"Key": "10.0.0.1", "Error": "dial tcp 10.0.0.1:179: i/o timeout"},
			"connect_failed", []string{"i/o timeout", "TCP-MD5", "passwordFile"}},
		{"refused", "failed to connect",
			gobgplog.Fields{"Key": "10.0.0.1", "Error": "dial tcp 10.0.0.1:179: connect: connection refused"},
			"connect_failed", []string{"connection refused", "nothing listens"}},
		{"we reject the peer's OPEN (codes inside the error)", "sent notification",
			gobgplog.Fields{"Key": "10.0.0.1", "Data": &bgp.MessageError{TypeCode: bgp.BGP_ERROR_OPEN_MESSAGE_ERROR, SubTypeCode: bgp.BGP_ERROR_SUB_BAD_PEER_AS}},
			"notification_sent", []string{"code 2/2", "not bgp.peers[].asn"}},
		{"rejected during OpenConfirm", "state changed",
			gobgplog.Fields{"Key": "10.0.0.1", "old": "BGP_FSM_OPENCONFIRM", "new": "BGP_FSM_IDLE", "reason": "invalid-msg"},
			"notification_received", []string{"OPEN exchange", "bad peer AS", "bgp.routerID"}},
		{"hold timer", "hold timer expired", gobgplog.Fields{"Key": "10.0.0.1"},
			"hold_timer_expired", []string{"hold timer expired"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var got []peerEvent
			var peers []string
			l := &gobgpLogger{onEvent: func(p string, ev peerEvent) { peers = append(peers, p); got = append(got, ev) }}
			l.Warn(tt.msg, tt.fields)
			g.Expect(peers).To(Equal([]string{"10.0.0.1"}))
			g.Expect(got[0].kind).To(Equal(tt.kind))
			for _, c := range tt.contains {
				g.Expect(got[0].message).To(ContainSubstring(c))
			}
		})
	}
}

func TestGobgpLoggerRedactsSecrets(t *testing.T) {
	g := NewWithT(t)
	logs := &logBuffer{}
	l := &gobgpLogger{log: logs.logger(), secrets: []string{"s3cret"}}
	l.Warn("something", gobgplog.Fields{"Key": "10.0.0.1", "Data": "password s3cret here"})
	g.Expect(logs.String()).To(ContainSubstring("<redacted>"))
	g.Expect(logs.String()).NotTo(ContainSubstring("s3cret"))
}

// Ordinary state changes are logged, not turned into errors.
func TestGobgpLoggerPassesOtherStateChanges(t *testing.T) {
	g := NewWithT(t)
	logs := &logBuffer{}
	called := false
	l := &gobgpLogger{log: logs.logger(), onEvent: func(string, peerEvent) { called = true }}
	l.Debug("state changed", gobgplog.Fields{"Key": "10.0.0.1", "old": "BGP_FSM_ACTIVE", "new": "BGP_FSM_OPENSENT", "reason": "new-connection"})
	g.Expect(called).To(BeFalse())
}
