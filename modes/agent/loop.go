package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/caplb/caplb/modes/election"
)

// requests are what arrived on the loop's channels since the last step.
type requests struct {
	exit    bool
	quiesce []quiesceRequest
}

// Run runs the loop until ctx ends, then hands over (make-before-break, at
// most quiesce.handoverTimeout), leaves the group and returns. force ending
// skips the hand-over. The data plane is closed (VIPs removed) on every path.
func (a *Agent) Run(ctx, force context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("agent loop panicked: %v", r)
		}
		a.shutdown()
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	var changed <-chan struct{}
	if a.ml != nil {
		changed = a.ml.Changed()
	}
	done := ctx.Done()
	for {
		var req requests
		select {
		case <-force.Done():
			a.log.Info("exiting without hand-over", "reason", "second signal")
			return nil
		case <-done:
			done = nil
			req.exit = true
		case q := <-a.quiesceC:
			req.quiesce = append(req.quiesce, q)
		case <-a.wake:
		case <-changed:
		case <-t.C:
		}
		a.iterate(time.Now(), req)
		if a.st.exiting && !a.st.holding {
			return nil
		}
	}
}

// iterate is one turn of the loop: gather, step, apply. The step is run
// again, from the same state, when it needs I/O to decide (a direct-ping
// round before a claim or before a holder lets go, the bootstrap probe, a
// draining holder's busy connections); one turn may need several kinds.
func (a *Agent) iterate(now time.Time, req requests) {
	in, next, out, repeated := turn(a.gather(now, req), func(in inputs) (loopState, output) {
		return a.rules.step(a.st, in)
	}, a.io)
	if repeated != needNothing {
		// A bug in step; applying what it returned keeps the agent (and the
		// connections a drain protects) alive, where a panic would not.
		a.log.Error(errRepeatedNeed, "applying the step's output as it is", "need", repeated.String())
	}
	a.apply(in, next, out)
}

var errRepeatedNeed = errors.New("agent step asked again for I/O it was given in the same turn")

// turn steps until the step needs no more I/O, doing what it asks for with
// io in between. Each kind of I/O is done at most once per turn, so a turn
// is at most one step per kind plus one. A step that asks again for a kind
// it was given ends the turn with that output; repeated names the kind
// (needNothing when the step behaved).
func turn(in inputs, step func(inputs) (loopState, output), io func(need, output, *inputs)) (_ inputs, next loopState, out output, repeated need) {
	next, out = step(in)
	for {
		n := out.need()
		switch {
		case n == needNothing:
			return in, next, out, needNothing
		case in.has(n):
			return in, next, out, n
		}
		io(n, out, &in)
		next, out = step(in)
	}
}

// io does the I/O of kind n for a step that returned out, into in.
func (a *Agent) io(n need, out output, in *inputs) {
	switch n {
	case needConfirmation:
		// What we report (eligibility, a silent holder) goes out before
		// the pings, as it would without them.
		a.ml.SetMeta(out.metaBefore)
		reached, needed := a.ml.ConfirmQuorum()
		in.confirmation = &confirmation{reached: reached, needed: needed}
	case needProbe:
		res, err := a.prober.probe(a.rules.vips)
		in.probe = &probeOutcome{res: res, err: err}
	case needBusy:
		n := a.dp.BusyConnections()
		in.busy = &n
	}
}

// need is the I/O out asks for (a step asks for one kind at a time).
func (o output) need() need {
	switch {
	case o.needConfirmation:
		return needConfirmation
	case o.needProbe:
		return needProbe
	case o.needBusy:
		return needBusy
	}
	return needNothing
}

// has reports whether in carries the outcome of I/O of kind n.
func (in inputs) has(n need) bool {
	switch n {
	case needConfirmation:
		return in.confirmation != nil
	case needProbe:
		return in.probe != nil
	case needBusy:
		return in.busy != nil
	}
	return false
}

func (n need) String() string {
	switch n {
	case needNothing:
		return "nothing"
	case needConfirmation:
		return "confirmation"
	case needProbe:
		return "probe"
	case needBusy:
		return "busy"
	}
	return fmt.Sprintf("need(%d)", int(n))
}

// gather reads everything a step needs from the world.
func (a *Agent) gather(now time.Time, req requests) inputs {
	in := inputs{now: now, exit: req.exit, quiesce: req.quiesce, probeJitter: rand.N(time.Second)}
	in.healthy, in.healthDetail = a.health.state()
	in.linkDown, in.linkUp = a.link.down(), a.link.up(now)
	in.digest = a.digest()
	if a.rules.spreadMode() {
		if s := a.dp.Status().ARP; s != nil {
			in.spread = s.Spread
		}
	}
	switch {
	case a.ml != nil:
		in.election = true
		in.view = a.ml.View()
		in.roster = a.ml.Roster()
		in.confirmedAt = a.ml.ConfirmedAt()
		if rec, ok := a.ml.(answerRecorder); ok {
			in.answers = make(map[string]election.Answers, len(in.view.Members))
			for _, m := range in.view.Members {
				in.answers[m.Name] = rec.Answers(m.Name)
			}
		}
		in.runningVersion, in.runningMember = in.view.Version, in.view.Member
	case a.store != nil:
		cur := a.store.current()
		in.runningVersion = cur.Version
		in.runningMember = !a.cfg.Membership.Dynamic || cur.Has(a.cfg.NodeName)
	default:
		in.runningVersion, in.runningMember = a.cfg.Membership.Version, true
	}
	return in
}

// apply carries out a step's output and adopts its state: the gossiped
// meta, the data plane's Sync (its failure keeps out.unsynced), the log, a
// membership pull, /status.
func (a *Agent) apply(in inputs, next loopState, out output) {
	prev := a.st
	for _, n := range out.notes {
		a.log.Info(n.msg, n.kv...)
	}
	if a.ml != nil {
		a.ml.SetMeta(out.metaBefore)
		if len(out.pull) > 0 {
			go a.ml.Pull(out.pull)
		}
	}
	if out.sync {
		if err := a.dp.Sync(context.Background(), out.desired); err != nil {
			a.log.Error(err, "data plane sync failed; retrying", "announce", out.desired.Announce)
			next = out.unsynced
		}
	}
	a.st = next
	if next.holding != prev.holding {
		a.m.transition(next.holding)
		if next.holding {
			a.log.Info("became owner: VIPs added and announced", "reason", next.lastReason, "vips", a.cfg.VIPs)
		} else {
			a.log.Info("released the VIPs", "reason", next.lastReason)
		}
		if a.ml != nil {
			a.ml.SetMeta(next.meta(out.eligible, in.digest))
		}
	}
	a.publish(in, out)
}

// digest summarises what members on one membership version must agree on:
// the mode, the VIPs and (dynamic) the running roster.
func (a *Agent) digest() string {
	if a.ml == nil || !a.cfg.Membership.Dynamic {
		return a.cfg.Digest()
	}
	return digestFor(a.cfg, a.ml.Roster())
}
