package controllers

import (
	"time"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// This file holds the per-member state machine as pure functions. A reconcile runs it in two
// steps around the backend calls:
//
//	stepObserved: what people and CAPI did (selected, disabled annotation, deletion, gone)
//	backend:      Ensure with the resulting states, then Quiesce / Restore where asked
//	stepBackend:  what the backend confirmed (in rotation, quiesced, restored, timed out)
//
// Everything the machine needs survives a manager restart: the state and its Since time live in
// status.targets (and the state also in the member's status annotation).

// record is a member's persisted place in the state machine. The zero value means "not a member".
type record struct {
	State lbv1.TargetState
	Since time.Time
}

func (r record) isMember() bool { return r.State != "" }

// observation is what the controller saw of one member object in this reconcile.
type observation struct {
	// Exists is false when the object is gone.
	Exists bool
	// Selected: the object matches the selector and no other LoadBalancer claims it.
	Selected bool
	// Deleting: the object has a deletionTimestamp.
	Deleting bool
	// Disabled: the object carries the disabled annotation.
	Disabled bool
}

// intent is what a reconcile must do for a member beyond keeping its annotations current.
type intent int

const (
	// intentNone: nothing to ask the backend.
	intentNone intent = iota
	// intentQuiesce: call Backend.Quiesce until done or timed out.
	intentQuiesce
	// intentRestore: call Backend.Restore; once done the member is adding again.
	intentRestore
	// intentRelease: the object no longer matches: remove our annotations and hook, forget it.
	intentRelease
	// intentDrop: the object is gone: forget it.
	intentDrop
	// intentIgnore: not a member and not becoming one.
	intentIgnore
)

// stepObserved applies the transitions driven by people and CAPI. Deletion wins over everything
// (a member being deleted is quiesced even if it stopped matching, because only we can release
// our hook), then selection, then the disabled annotation.
func stepObserved(prev record, obs observation, now time.Time) (record, intent) {
	if !obs.Exists {
		return record{}, intentDrop
	}
	if !prev.isMember() {
		switch {
		case !obs.Selected || obs.Deleting:
			// A Machine already being deleted is not worth joining: CAPI may be past its
			// pre-drain hooks, and it would only leave again.
			return record{}, intentIgnore
		case obs.Disabled:
			return record{State: lbv1.TargetDisabled, Since: stamp(now)}, intentNone
		default:
			return record{State: lbv1.TargetAdding, Since: stamp(now)}, intentNone
		}
	}
	if obs.Deleting {
		switch prev.State {
		case lbv1.TargetAdding, lbv1.TargetActive, lbv1.TargetDisabling:
			return record{State: lbv1.TargetRemoving, Since: stamp(now)}, intentQuiesce
		case lbv1.TargetDisabled:
			// Already quiesced at the user's request: nothing left to drain.
			return record{State: lbv1.TargetRemoved, Since: stamp(now)}, intentNone
		case lbv1.TargetRemoving:
			return prev, intentQuiesce
		default: // removed
			return prev, intentNone
		}
	}
	if !obs.Selected {
		return record{}, intentRelease
	}
	switch prev.State {
	case lbv1.TargetAdding, lbv1.TargetActive:
		if obs.Disabled {
			return record{State: lbv1.TargetDisabling, Since: stamp(now)}, intentQuiesce
		}
		return prev, intentNone
	case lbv1.TargetDisabling:
		if obs.Disabled {
			return prev, intentQuiesce
		}
		return prev, intentRestore
	case lbv1.TargetDisabled:
		if obs.Disabled {
			return prev, intentNone
		}
		return prev, intentRestore
	case lbv1.TargetRemoving, lbv1.TargetRemoved:
		// The object is not deleting (any more): a removal cannot be undone by CAPI, so this is a
		// stale record (e.g. a new object with the same name). Start over.
		if obs.Disabled {
			return record{State: lbv1.TargetDisabled, Since: stamp(now)}, intentNone
		}
		return record{State: lbv1.TargetAdding, Since: stamp(now)}, intentNone
	default:
		// Unknown state (hand-edited annotation): start over.
		return record{State: lbv1.TargetAdding, Since: stamp(now)}, intentNone
	}
}

// backendResult is what the backend said about one member in this reconcile.
type backendResult struct {
	// Known is false when Ensure failed: in-rotation information is then missing and adding /
	// active members keep their state.
	Known bool
	// InRotation: Ensure listed the member.
	InRotation bool
	// QuiesceDone / RestoreDone: the respective call reported Done.
	QuiesceDone, RestoreDone bool
}

// outcome flags notable transitions for events and metrics.
type outcome int

const (
	outcomeNone outcome = iota
	// outcomeTimedOut: a quiesce passed spec.quiesce.timeout and the member moved on anyway.
	outcomeTimedOut
)

// stepBackend applies the transitions the backend confirms. timeout bounds disabling and
// removing from their Since time.
func stepBackend(cur record, in intent, res backendResult, now time.Time, timeout time.Duration) (record, outcome) {
	switch cur.State {
	case lbv1.TargetAdding:
		if res.Known && res.InRotation {
			return record{State: lbv1.TargetActive, Since: stamp(now)}, outcomeNone
		}
	case lbv1.TargetActive:
		if res.Known && !res.InRotation {
			return record{State: lbv1.TargetAdding, Since: stamp(now)}, outcomeNone
		}
	case lbv1.TargetDisabling, lbv1.TargetDisabled:
		if in == intentRestore {
			if res.RestoreDone {
				return record{State: lbv1.TargetAdding, Since: stamp(now)}, outcomeNone
			}
			return cur, outcomeNone
		}
		if cur.State == lbv1.TargetDisabling && in == intentQuiesce {
			if res.QuiesceDone {
				return record{State: lbv1.TargetDisabled, Since: stamp(now)}, outcomeNone
			}
			if quiesceExpired(cur, now, timeout) {
				return record{State: lbv1.TargetDisabled, Since: stamp(now)}, outcomeTimedOut
			}
		}
	case lbv1.TargetRemoving:
		if in == intentQuiesce {
			if res.QuiesceDone {
				return record{State: lbv1.TargetRemoved, Since: stamp(now)}, outcomeNone
			}
			if quiesceExpired(cur, now, timeout) {
				return record{State: lbv1.TargetRemoved, Since: stamp(now)}, outcomeTimedOut
			}
		}
	}
	return cur, outcomeNone
}

func quiesceExpired(cur record, now time.Time, timeout time.Duration) bool {
	return !cur.Since.IsZero() && now.Sub(cur.Since) >= timeout
}

// quiesceDeadline is how long until a quiescing member times out (never negative).
func quiesceDeadline(cur record, now time.Time, timeout time.Duration) time.Duration {
	left := timeout - now.Sub(cur.Since)
	if left < 0 {
		return 0
	}
	return left
}

// holdsHook reports whether a Machine in this state carries our pre-drain hook: from the moment
// it joins until it is quiesced for deletion.
func holdsHook(s lbv1.TargetState) bool {
	switch s {
	case lbv1.TargetAdding, lbv1.TargetActive, lbv1.TargetDisabling, lbv1.TargetDisabled, lbv1.TargetRemoving:
		return true
	}
	return false
}

// parseState reads a status annotation; unknown values yield "".
func parseState(v string) lbv1.TargetState {
	switch s := lbv1.TargetState(v); s {
	case lbv1.TargetAdding, lbv1.TargetActive, lbv1.TargetDisabling, lbv1.TargetDisabled, lbv1.TargetRemoving, lbv1.TargetRemoved:
		return s
	}
	return ""
}

// transitionEvent names the event for a state change, or "" when the change is not worth one.
// Timeouts and releases have their own events.
func transitionEvent(from, to lbv1.TargetState) (reason string, warning bool) {
	switch {
	case from == to:
		return "", false
	case from == "" && (to == lbv1.TargetAdding || to == lbv1.TargetDisabled):
		return lbv1.EventTargetAdded, false
	case to == lbv1.TargetActive:
		return lbv1.EventTargetActive, false
	case from == lbv1.TargetActive && to == lbv1.TargetAdding:
		return lbv1.EventTargetLeftRotation, true
	case (from == lbv1.TargetDisabled || from == lbv1.TargetDisabling) && to == lbv1.TargetAdding:
		return lbv1.EventTargetEnabled, false
	case to == lbv1.TargetDisabling:
		return lbv1.EventTargetDisabling, false
	case to == lbv1.TargetDisabled:
		return lbv1.EventTargetDisabled, false
	case to == lbv1.TargetRemoving:
		return lbv1.EventTargetRemoving, false
	case to == lbv1.TargetRemoved:
		return lbv1.EventTargetRemoved, false
	case to == lbv1.TargetAdding:
		// removing/removed → adding: a new object reused the name.
		return lbv1.EventTargetAdded, false
	}
	return "", false
}

// stamp is the Since of a new state: now rounded up to the next whole second.
// status.targets[].since has second precision (metav1.Time); a value read back from it must never
// be earlier than the real transition, or a drain measured from it would end up to a second early
// (after a manager restart, or on any reconcile that reads the record back). Rounding up makes a
// drain end at most a second late, never early. (MicroTime would change the field's wire format,
// which existing objects could not be read back in.)
func stamp(now time.Time) time.Time {
	if t := now.Truncate(time.Second); !t.Equal(now) {
		return t.Add(time.Second)
	}
	return now
}
