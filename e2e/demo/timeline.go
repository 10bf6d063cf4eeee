package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// timeline prints timestamped lines: the steps the demo takes, and what the observer sees the
// controllers do in between. It is safe for concurrent use.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func newTimeline(out io.Writer) *timeline { return &timeline{out: out, start: time.Now()} }

func (t *timeline) line(mark, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	fmt.Fprintf(t.out, "%s %+8.3fs %s %s\n", now.Format("15:04:05.000"), now.Sub(t.start).Seconds(), mark,
		fmt.Sprintf(format, args...))
}

// step is something the demo does (the user's side).
func (t *timeline) step(format string, args ...any) { t.line("==>", format, args...) }

// seen is something a controller did, as observed through the API.
func (t *timeline) seen(format string, args ...any) { t.line("   ", format, args...) }

// ok is a checked outcome.
func (t *timeline) ok(format string, args ...any) { t.line(" ok", format, args...) }

// fail reports why the demo stops.
func (t *timeline) fail(format string, args ...any) { t.line("!!!", format, args...) }
