package bgp

import (
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// gobgpLogger routes gobgp's logs into logr and turns the few messages that explain a session
// problem into peer events. gobgp reports why a session failed (a NOTIFICATION from the peer,
// a connect error) only in its logs: its peer-state API carries the new state, not the reason.
type gobgpLogger struct {
	log     logr.Logger
	onEvent func(peer string, ev peerEvent)
	// secrets are redacted from any logged field; gobgp does not log passwords today, but a
	// debug dump of a peer configuration would carry one.
	secrets []string
}

// peerEvent is a session problem (or recovery) worth surfacing per peer.
type peerEvent struct {
	// kind is a metric label: notification_received, notification_sent, connect_failed,
	// hold_timer_expired, or "" for a message that only updates the last reason.
	kind string
	// message is a human sentence, shown in logs and /status.
	message string
}

var _ gobgplog.Logger = &gobgpLogger{}

func (l *gobgpLogger) Panic(msg string, f gobgplog.Fields) {
	l.emit(0, msg, f, true)
	panic(msg)
}

// Fatal is logged as an error; gobgp calls it for unrecoverable internal states (a gRPC listen
// failure, which we never configure). We do not exit the agent from inside a library.
func (l *gobgpLogger) Fatal(msg string, f gobgplog.Fields) { l.emit(0, msg, f, true) }
func (l *gobgpLogger) Error(msg string, f gobgplog.Fields) { l.emit(0, msg, f, true) }
func (l *gobgpLogger) Warn(msg string, f gobgplog.Fields)  { l.emit(0, msg, f, false) }
func (l *gobgpLogger) Info(msg string, f gobgplog.Fields)  { l.emit(1, msg, f, false) }
func (l *gobgpLogger) Debug(msg string, f gobgplog.Fields) { l.emit(2, msg, f, false) }

// SetLevel is ignored: verbosity is logr's.
func (l *gobgpLogger) SetLevel(gobgplog.LogLevel) {}

// GetLevel reports Debug because gobgp only produces some messages we need ("failed to
// connect") when its logger is at debug level; logr's V-levels still decide what is printed.
func (l *gobgpLogger) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }

func (l *gobgpLogger) emit(v int, msg string, f gobgplog.Fields, isErr bool) {
	peer, _ := f["Key"].(string)
	if ev, ok := l.classify(msg, f); ok && peer != "" && l.onEvent != nil {
		// The speaker logs these itself, once per change, with context; do not double them.
		l.onEvent(peer, ev)
		return
	}
	kv := make([]any, 0, 2*len(f))
	for k, val := range f {
		if k == gobgplog.FieldFacility {
			continue
		}
		kv = append(kv, strings.ToLower(k), l.redact(val))
	}
	lg := l.log.WithValues("component", "gobgp")
	switch {
	case isErr:
		lg.Error(nil, msg, kv...)
	default:
		lg.V(v).Info(msg, kv...)
	}
}

func (l *gobgpLogger) redact(v any) any {
	if len(l.secrets) == 0 {
		return v
	}
	s := fmt.Sprint(v)
	for _, sec := range l.secrets {
		if strings.Contains(s, sec) {
			return "<redacted>"
		}
	}
	return v
}

func (l *gobgpLogger) classify(msg string, f gobgplog.Fields) (peerEvent, bool) {
	switch msg {
	case "received notification", "sent notification":
		code, _ := f["Code"].(uint8)
		sub, _ := f["Subcode"].(uint8)
		if me, ok := f["Data"].(*bgp.MessageError); ok && code == 0 {
			// Sent while validating the peer's OPEN: the codes are in the error.
			code, sub = me.TypeCode, me.SubTypeCode
		}
		if msg == "received notification" {
			return peerEvent{kind: "notification_received", message: "peer sent NOTIFICATION: " + describeNotification(code, sub, true)}, true
		}
		return peerEvent{kind: "notification_sent", message: "sent NOTIFICATION to peer: " + describeNotification(code, sub, false)}, true
	case "failed to connect":
		return peerEvent{kind: "connect_failed", message: describeConnectError(fmt.Sprint(f["Error"]))}, true
	case "state changed":
		// gobgp drops a NOTIFICATION received in OpenSent/OpenConfirm without decoding or
		// logging it; the state change ("invalid-msg") is the only trace. It is how a router
		// rejects our OPEN, so say what that usually means.
		from, reason := fmt.Sprint(f["old"]), fmt.Sprint(f["reason"])
		if (from == "BGP_FSM_OPENSENT" || from == "BGP_FSM_OPENCONFIRM") && reason == "invalid-msg" {
			return peerEvent{kind: "notification_received", message: "the peer closed the session during the OPEN exchange (a NOTIFICATION gobgp does not decode in this state): " +
				"it rejected this node's OPEN, most often because bgp.asn is not the AS it expects from this node (bad peer AS), " +
				"or because bgp.routerID clashes with another speaker; the router's log names the exact error"}, true
		}
		return peerEvent{}, false
	case "hold timer expired":
		return peerEvent{kind: "hold_timer_expired", message: "hold timer expired: no KEEPALIVE or UPDATE from the peer within the hold time"}, true
	}
	return peerEvent{}, false
}

// describeNotification names the error and, for the ones operators actually hit, says what to
// check. fromPeer tells whose configuration the peer objected to.
func describeNotification(code, sub uint8, fromPeer bool) string {
	s := bgp.NewNotificationErrorCode(code, sub).String()
	var hint string
	switch {
	case code == bgp.BGP_ERROR_OPEN_MESSAGE_ERROR && sub == bgp.BGP_ERROR_SUB_BAD_PEER_AS:
		if fromPeer {
			hint = "the router expects a different AS number from this node: make bgp.asn match the router's remote-as for this node"
		} else {
			hint = "the peer's AS number is not bgp.peers[].asn"
		}
	case code == bgp.BGP_ERROR_OPEN_MESSAGE_ERROR && sub == bgp.BGP_ERROR_SUB_BAD_BGP_IDENTIFIER:
		hint = "the router ID is invalid or equal to the peer's: set a unique bgp.routerID"
	case code == bgp.BGP_ERROR_OPEN_MESSAGE_ERROR && sub == bgp.BGP_ERROR_SUB_UNACCEPTABLE_HOLD_TIME:
		hint = "the hold times are incompatible: check holdTime on both sides"
	case code == bgp.BGP_ERROR_CEASE && (sub == bgp.BGP_ERROR_SUB_CONNECTION_REJECTED || sub == bgp.BGP_ERROR_SUB_PEER_DECONFIGURED):
		hint = "the router has no (or no longer a) neighbor statement for this node's address"
	case code == bgp.BGP_ERROR_CEASE && sub == bgp.BGP_ERROR_SUB_ADMINISTRATIVE_SHUTDOWN:
		hint = "the session was shut down administratively"
	}
	if hint != "" {
		return fmt.Sprintf("%s (code %d/%d): %s", s, code, sub, hint)
	}
	return fmt.Sprintf("%s (code %d/%d)", s, code, sub)
}

func describeConnectError(err string) string {
	switch {
	case strings.Contains(err, "i/o timeout"):
		return "connect failed: " + err + " (no answer: the peer is unreachable or filtered, or a TCP-MD5 password mismatch makes its kernel drop our segments; compare bgp.peers[].passwordFile with the router's neighbor password)"
	case strings.Contains(err, "connection refused"):
		return "connect failed: " + err + " (nothing listens on the peer's BGP port: is the router's BGP daemon running, and is bgp.peers[].port right?)"
	}
	return "connect failed: " + err
}
