package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// managerLog keeps the managers' last log lines (caplb's and CAPI's, at verbosity 1) so that a
// flow that fails can show what the reconcilers said about its namespace: a wait that times out
// with no status at all says nothing by itself (seen once in CI: a LoadBalancer without a single
// condition after 45 s).
type managerLog struct {
	mu    sync.Mutex
	lines []string
	next  int // ring position once full
}

// managerLogLines bounds the memory the ring holds.
const managerLogLines = 20000

func (l *managerLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.add(fmt.Sprintf("%s %s %s", time.Now().UTC().Format("15:04:05.000"), prefix, args))
	}, funcr.Options{Verbosity: 1})
}

func (l *managerLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < managerLogLines {
		l.lines = append(l.lines, line)
		return
	}
	l.lines[l.next] = line
	l.next = (l.next + 1) % managerLogLines
}

// about returns, oldest first, the last limit lines that mention s.
func (l *managerLog) about(s string, limit int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ordered := append(append([]string(nil), l.lines[l.next:]...), l.lines[:l.next]...)
	var out []string
	for _, line := range ordered {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out[max(0, len(out)-limit):]
}

// dumpOnFailure prints, when t failed, what the managers logged about namespace ns.
func (l *managerLog) dumpOnFailure(t *testing.T, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lines := l.about(ns, 80)
		t.Logf("the managers' last %d log lines about namespace %s:\n%s", len(lines), ns, strings.Join(lines, "\n"))
	})
}
