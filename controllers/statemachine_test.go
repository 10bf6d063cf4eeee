package controllers

import (
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

var (
	t0  = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(time.Minute)
)

func rec(s lbv1.TargetState) record { return record{State: s, Since: t0} }

func TestStepObserved(t *testing.T) {
	live := observation{Exists: true, Selected: true}
	disabled := observation{Exists: true, Selected: true, Disabled: true}
	deleting := observation{Exists: true, Selected: true, Deleting: true}
	deletingUnselected := observation{Exists: true, Deleting: true}
	unselected := observation{Exists: true}
	gone := observation{}

	tests := []struct {
		name       string
		prev       record
		obs        observation
		wantState  lbv1.TargetState
		wantSince  time.Time
		wantIntent intent
	}{
		{"new selected member is adding", record{}, live, lbv1.TargetAdding, now, intentNone},
		{"new member with disabled annotation starts disabled", record{}, disabled, lbv1.TargetDisabled, now, intentNone},
		{"new deleting object is not taken", record{}, deleting, "", time.Time{}, intentIgnore},
		{"unselected non-member is ignored", record{}, unselected, "", time.Time{}, intentIgnore},
		{"gone non-member is dropped", record{}, gone, "", time.Time{}, intentDrop},

		{"adding stays adding", rec(lbv1.TargetAdding), live, lbv1.TargetAdding, t0, intentNone},
		{"active stays active", rec(lbv1.TargetActive), live, lbv1.TargetActive, t0, intentNone},
		{"active + disabled annotation → disabling", rec(lbv1.TargetActive), disabled, lbv1.TargetDisabling, now, intentQuiesce},
		{"adding + disabled annotation → disabling", rec(lbv1.TargetAdding), disabled, lbv1.TargetDisabling, now, intentQuiesce},
		{"disabling keeps quiescing, Since kept", rec(lbv1.TargetDisabling), disabled, lbv1.TargetDisabling, t0, intentQuiesce},
		{"disabled stays disabled", rec(lbv1.TargetDisabled), disabled, lbv1.TargetDisabled, t0, intentNone},
		{"disabled, annotation removed → restore", rec(lbv1.TargetDisabled), live, lbv1.TargetDisabled, t0, intentRestore},
		{"disabling, annotation removed → restore", rec(lbv1.TargetDisabling), live, lbv1.TargetDisabling, t0, intentRestore},

		{"active + deleting → removing", rec(lbv1.TargetActive), deleting, lbv1.TargetRemoving, now, intentQuiesce},
		{"adding + deleting → removing", rec(lbv1.TargetAdding), deleting, lbv1.TargetRemoving, now, intentQuiesce},
		{"disabling + deleting → removing (restart Since)", rec(lbv1.TargetDisabling), deleting, lbv1.TargetRemoving, now, intentQuiesce},
		{"disabled + deleting → removed at once", rec(lbv1.TargetDisabled), deleting, lbv1.TargetRemoved, now, intentNone},
		{"removing keeps quiescing, Since kept", rec(lbv1.TargetRemoving), deleting, lbv1.TargetRemoving, t0, intentQuiesce},
		{"deletion wins over selection", rec(lbv1.TargetActive), deletingUnselected, lbv1.TargetRemoving, now, intentQuiesce},
		{"removed stays removed", rec(lbv1.TargetRemoved), deleting, lbv1.TargetRemoved, t0, intentNone},

		{"member no longer selected → release", rec(lbv1.TargetActive), unselected, "", time.Time{}, intentRelease},
		{"disabled member no longer selected → release", rec(lbv1.TargetDisabled), unselected, "", time.Time{}, intentRelease},
		{"member gone → drop", rec(lbv1.TargetActive), gone, "", time.Time{}, intentDrop},
		{"removed member gone → drop", rec(lbv1.TargetRemoved), gone, "", time.Time{}, intentDrop},

		{"stale removed record on a live object starts over", rec(lbv1.TargetRemoved), live, lbv1.TargetAdding, now, intentNone},
		{"stale removing record, disabled object", rec(lbv1.TargetRemoving), disabled, lbv1.TargetDisabled, now, intentNone},
		{"unknown state starts over", record{State: "bogus", Since: t0}, live, lbv1.TargetAdding, now, intentNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, in := stepObserved(tt.prev, tt.obs, now)
			g.Expect(got.State).To(Equal(tt.wantState))
			g.Expect(got.Since).To(Equal(tt.wantSince))
			g.Expect(in).To(Equal(tt.wantIntent))
		})
	}
}

func TestStepBackend(t *testing.T) {
	timeout := 2 * time.Minute
	fresh := func(s lbv1.TargetState) record { return record{State: s, Since: now.Add(-10 * time.Second)} }
	old := func(s lbv1.TargetState) record { return record{State: s, Since: now.Add(-3 * time.Minute)} }
	inRot := backendResult{Known: true, InRotation: true}
	outRot := backendResult{Known: true}
	unknown := backendResult{}

	tests := []struct {
		name        string
		cur         record
		in          intent
		res         backendResult
		wantState   lbv1.TargetState
		wantOutcome outcome
	}{
		{"adding + in rotation → active", fresh(lbv1.TargetAdding), intentNone, inRot, lbv1.TargetActive, outcomeNone},
		{"adding, not in rotation, stays", fresh(lbv1.TargetAdding), intentNone, outRot, lbv1.TargetAdding, outcomeNone},
		{"adding, backend failed, stays", fresh(lbv1.TargetAdding), intentNone, unknown, lbv1.TargetAdding, outcomeNone},
		{"active, backend dropped it → adding", fresh(lbv1.TargetActive), intentNone, outRot, lbv1.TargetAdding, outcomeNone},
		{"active, backend failed, stays active", fresh(lbv1.TargetActive), intentNone, unknown, lbv1.TargetActive, outcomeNone},
		{"disabling, quiesced → disabled", fresh(lbv1.TargetDisabling), intentQuiesce, backendResult{Known: true, QuiesceDone: true}, lbv1.TargetDisabled, outcomeNone},
		{"disabling, not quiesced, stays", fresh(lbv1.TargetDisabling), intentQuiesce, outRot, lbv1.TargetDisabling, outcomeNone},
		{"disabling past timeout → disabled, timed out", old(lbv1.TargetDisabling), intentQuiesce, outRot, lbv1.TargetDisabled, outcomeTimedOut},
		{"removing, quiesced → removed", fresh(lbv1.TargetRemoving), intentQuiesce, backendResult{QuiesceDone: true}, lbv1.TargetRemoved, outcomeNone},
		{"removing, not quiesced, stays", fresh(lbv1.TargetRemoving), intentQuiesce, outRot, lbv1.TargetRemoving, outcomeNone},
		{"removing past timeout → removed, timed out", old(lbv1.TargetRemoving), intentQuiesce, unknown, lbv1.TargetRemoved, outcomeTimedOut},
		{"removing exactly at timeout → removed", record{State: lbv1.TargetRemoving, Since: now.Add(-timeout)}, intentQuiesce, outRot, lbv1.TargetRemoved, outcomeTimedOut},
		{"disabled, restored → adding", fresh(lbv1.TargetDisabled), intentRestore, backendResult{RestoreDone: true}, lbv1.TargetAdding, outcomeNone},
		{"disabled, restore pending, stays", fresh(lbv1.TargetDisabled), intentRestore, outRot, lbv1.TargetDisabled, outcomeNone},
		{"disabling, restored → adding", fresh(lbv1.TargetDisabling), intentRestore, backendResult{RestoreDone: true}, lbv1.TargetAdding, outcomeNone},
		{"disabled, no intent, never times out", old(lbv1.TargetDisabled), intentNone, outRot, lbv1.TargetDisabled, outcomeNone},
		{"removed is final", old(lbv1.TargetRemoved), intentNone, inRot, lbv1.TargetRemoved, outcomeNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, out := stepBackend(tt.cur, tt.in, tt.res, now, timeout)
			g.Expect(got.State).To(Equal(tt.wantState))
			g.Expect(out).To(Equal(tt.wantOutcome))
			if got.State != tt.cur.State {
				g.Expect(got.Since).To(Equal(now), "a transition restarts Since")
			} else {
				g.Expect(got.Since).To(Equal(tt.cur.Since))
			}
		})
	}
}

func TestHoldsHook(t *testing.T) {
	g := NewWithT(t)
	for _, s := range []lbv1.TargetState{lbv1.TargetAdding, lbv1.TargetActive, lbv1.TargetDisabling, lbv1.TargetDisabled, lbv1.TargetRemoving} {
		g.Expect(holdsHook(s)).To(BeTrue(), string(s))
	}
	g.Expect(holdsHook(lbv1.TargetRemoved)).To(BeFalse())
	g.Expect(holdsHook("")).To(BeFalse())
}

func TestTransitionEvent(t *testing.T) {
	tests := []struct {
		from, to lbv1.TargetState
		reason   string
		warning  bool
	}{
		{"", lbv1.TargetAdding, lbv1.EventTargetAdded, false},
		{"", lbv1.TargetDisabled, lbv1.EventTargetAdded, false},
		{lbv1.TargetAdding, lbv1.TargetActive, lbv1.EventTargetActive, false},
		{lbv1.TargetActive, lbv1.TargetAdding, lbv1.EventTargetLeftRotation, true},
		{lbv1.TargetActive, lbv1.TargetDisabling, lbv1.EventTargetDisabling, false},
		{lbv1.TargetDisabling, lbv1.TargetDisabled, lbv1.EventTargetDisabled, false},
		{lbv1.TargetDisabled, lbv1.TargetAdding, lbv1.EventTargetEnabled, false},
		{lbv1.TargetActive, lbv1.TargetRemoving, lbv1.EventTargetRemoving, false},
		{lbv1.TargetRemoving, lbv1.TargetRemoved, lbv1.EventTargetRemoved, false},
		{lbv1.TargetDisabled, lbv1.TargetRemoved, lbv1.EventTargetRemoved, false},
		{lbv1.TargetActive, lbv1.TargetActive, "", false},
	}
	for _, tt := range tests {
		g := NewWithT(t)
		reason, warning := transitionEvent(tt.from, tt.to)
		g.Expect(reason).To(Equal(tt.reason), "%s → %s", tt.from, tt.to)
		g.Expect(warning).To(Equal(tt.warning), "%s → %s", tt.from, tt.to)
	}
}

func TestParseState(t *testing.T) {
	g := NewWithT(t)
	g.Expect(parseState("active")).To(Equal(lbv1.TargetActive))
	g.Expect(parseState("removed")).To(Equal(lbv1.TargetRemoved))
	g.Expect(parseState("Active")).To(BeEmpty())
	g.Expect(parseState("")).To(BeEmpty())
}

// A Since written to status.targets (second precision) and read back is never earlier than the
// real transition, so a drain measured from it never ends early.
func TestStampNeverEarlierAfterRoundTrip(t *testing.T) {
	g := NewWithT(t)
	base := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	for _, frac := range []time.Duration{0, time.Millisecond, 300 * time.Millisecond, 999 * time.Millisecond} {
		now := base.Add(frac)
		rec, _ := stepObserved(record{State: lbv1.TargetActive, Since: base.Add(-time.Hour)}, observation{Exists: true, Selected: true, Deleting: true}, now)
		g.Expect(rec.State).To(Equal(lbv1.TargetRemoving))
		b, err := json.Marshal(metav1.NewTime(rec.Since))
		g.Expect(err).NotTo(HaveOccurred())
		var back metav1.Time
		g.Expect(json.Unmarshal(b, &back)).To(Succeed())
		g.Expect(back.Time).NotTo(BeTemporally("<", now), "frac %v", frac)
		g.Expect(back.Time).To(BeTemporally("<", now.Add(time.Second)), "frac %v", frac)
	}
}
