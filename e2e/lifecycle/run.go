//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/lifecycle/observe"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// Observed is a scenario run with its client's and sampler's record.
type Observed struct {
	Report   Report
	Input    observe.Input
	Result   observe.Result
	Failures []observe.Sample
	// Clients is what client-go saw through the VIP (a real control plane only).
	Clients *clients.Result
	// ARPAnswers (ARP labs) are the ARP watcher's rounds (arpwatch.go): which machines claimed
	// the VIP on the wire in each.
	ARPAnswers []observe.HolderSample
}

// stepLogger is observe.Recorder that also prints steps as they happen.
type stepLogger struct {
	*observe.Recorder
	log func(string)
}

func (s stepLogger) Step(text string) {
	s.Recorder.Step(text)
	if s.log != nil {
		s.log(text)
	}
}

// RunObserved runs the scenario with a real client on the VIP (from the first Machine on) and
// the VIP's holders sampled every 10 ms (on a real control plane also the etcd membership, every
// 250 ms); log (optional) gets each step.
//
// The client's GETs are retried by net/http when a kept-alive connection turns out to be dead
// before any answer, as every client-go GET is; a request that gets no answer, or an error
// after an answer started, is a failure.
func RunObserved(ctx context.Context, l *Lab, log func(string)) (Observed, error) {
	return runObserved(ctx, l, log, func(rec Recorder, afterBootstrap func() error) lifeRunner {
		return &Scenario{Lab: l, Recorder: rec, AfterBootstrap: afterBootstrap}
	})
}

// lifeRunner is a life RunObserved can watch: Scenario, TakeOverScenario.
type lifeRunner interface {
	Run(ctx context.Context) (Report, error)
	Teardown(ctx context.Context) error
}

// runObserved runs the life newLife makes (given the recorder and the hook that starts the
// clients once the VIP is first held) with the clients and samplers of RunObserved.
func runObserved(ctx context.Context, l *Lab, log func(string), newLife func(Recorder, func() error) lifeRunner) (Observed, error) {
	var out Observed
	rec := observe.NewRecorder()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go l.watchMachines(sctx, rec)
	etcdDone := make(chan struct{})
	go func() {
		defer close(etcdDone)
		if l.real != nil {
			// The etcd membership beside the VIP's holders: learners added and promoted,
			// members removed, the leader moving.
			l.sampleEtcd(sctx, rec, 250*time.Millisecond)
		}
	}()
	var prober *observe.Prober
	var cg *clients.Run
	var arpAnswers func() []observe.HolderSample
	s := newLife(stepLogger{rec, log}, func() error {
		var err error
		opts := observe.ProberOptions{URL: l.APIURL(), CAPEM: l.CAPEM(), Dial: l.DialClient, RetryIdempotent: true}
		if l.real != nil {
			// A real API server on a machine that shares 2 cores with three others answers a
			// fresh TLS connection in over a second now and then: the clients' timeout (5 s, as
			// client-go's here) decides a failure; the gaps are measured apart.
			opts.NoStream, opts.Timeout = true, 5*time.Second
		}
		prober, err = observe.NewProber(opts)
		if err != nil {
			return err
		}
		prober.Start(sctx)
		go rec.SampleHolders(sctx, 10*time.Millisecond, l.Holders)
		if l.opts.Backend == ARP {
			if arpAnswers, err = l.WatchARP(sctx); err != nil {
				return err
			}
		}
		if l.real != nil {
			cg, err = l.startClients(sctx)
		}
		return err
	})
	rep, err := s.Run(ctx)
	out.Report = rep
	if prober != nil {
		prober.Stop()
		out.Failures = prober.Failures()
		out.Input.Samples = prober.Samples()
	}
	if cg != nil {
		res := cg.Stop(30 * time.Second)
		out.Clients = &res
	}
	stop()
	rec.Stop()
	<-etcdDone
	if arpAnswers != nil {
		out.ARPAnswers = arpAnswers()
	}
	out.Input.Backend = string(l.opts.Backend)
	out.Input.Timeline = rec.Timeline()
	out.Result = observe.Summarize(out.Input)
	if out.Clients != nil {
		out.Clients.EtcdRefusalsUnexplained = len(unexplainedEtcdRefusals(out.Clients.EtcdRefusedAt, out.Input.Timeline.Etcd))
	}
	if l.opts.Backend == BGP {
		// Several next hops are BGP's normal state (ECMP), not two owners, and a new member
		// joining them is no claim against anyone.
		out.Result.DualOwnerMSMax, out.Result.SpuriousClaims = nil, nil
	}
	if err != nil {
		return out, err
	}
	if prober == nil {
		return out, fmt.Errorf("the scenario never reached the client's start")
	}
	return out, s.Teardown(ctx)
}

// watchMachines records the Machines' phases and caplb's pre-drain hook on deleting Machines.
func (l *Lab) watchMachines(ctx context.Context, rec *observe.Recorder) {
	hook := ""
	seen := map[string]bool{}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if ms, err := l.Machines(ctx); err == nil {
			now := map[string]bool{}
			for _, m := range ms {
				now[m.Name] = true
				seen[m.Name] = true
				rec.Phase(m.Name, phaseOf(&m))
				if hook == "" {
					hook = hookOf(&m)
				}
				if m.DeletionTimestamp != nil && hook != "" {
					if _, held := m.Annotations[hook]; held {
						rec.HookHeld(m.Name)
					} else {
						rec.HookReleased(m.Name)
					}
				}
			}
			for name := range seen {
				if !now[name] {
					rec.Phase(name, "Gone")
					rec.HookReleased(name)
					delete(seen, name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func phaseOf(m *clusterv1.Machine) string {
	if m.DeletionTimestamp != nil {
		return "Deleting"
	}
	if m.Status.Phase != "" {
		return m.Status.Phase
	}
	return "Pending"
}

// hookOf finds caplb's pre-drain hook key on a Machine.
func hookOf(m *clusterv1.Machine) string {
	prefix := lbv1.PreDrainHookAnnotation("")
	for k := range m.Annotations {
		if strings.HasPrefix(k, prefix) {
			return k
		}
	}
	return ""
}
