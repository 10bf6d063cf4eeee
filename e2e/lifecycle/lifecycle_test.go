//go:build linux

package lifecycle_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lifecycle"
)

var bins lifecycle.Binaries

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		var err error
		dir, err := os.MkdirTemp("", "caplb-lifecycle-bin-")
		if err == nil {
			bins, err = lifecycle.BuildBinaries(dir)
			defer os.RemoveAll(dir)
		}
		if err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

type tRecorder struct{ t *testing.T }

func (r tRecorder) Step(s string) { r.t.Logf("%s ==> %s", time.Now().Format("15:04:05.000"), s) }

func runLifecycle(t *testing.T, backend lifecycle.Backend, name string) {
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := lifecycle.Start(ctx, lifecycle.Options{Backend: backend, Binaries: bins, Name: name})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		if t.Failed() {
			t.Log(l.LogTail(40))
		}
		if err := l.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	}()
	s := &lifecycle.Scenario{Lab: l, Recorder: tRecorder{t}}
	rep, err := s.Run(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("replacements %v, hook holds %v", rep.Replacements, rep.HookHolds)
}

func TestLifecycleARP(t *testing.T) { runLifecycle(t, lifecycle.ARP, "lcarp") }
