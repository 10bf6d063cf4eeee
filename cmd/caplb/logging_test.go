package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// TestLoggingOnlyJSON: client-go logs through klog; routed to the manager's logger, its lines are JSON
// like the manager's own, so a log pipeline parsing JSON loses none of them.
func TestLoggingOnlyJSON(t *testing.T) {
	var buf bytes.Buffer
	// The manager's defaults: production zap, JSON encoder.
	opts := zap.Options{}
	setupLogging(&opts, &buf)
	t.Cleanup(klog.ClearLogger)

	for _, tc := range []struct {
		name string
		log  func()
		msg  string
	}{
		{"klog info", func() { klog.Info("klog info line") }, "klog info line"},
		{"klog warning", func() { klog.Warning("client-go warning line") }, "client-go warning line"},
		{"klog error", func() { klog.ErrorS(errors.New("boom"), "klog error line") }, "klog error line"},
		{"klog structured", func() { klog.InfoS("klog structured line", "key", "value") }, "klog structured line"},
		{"manager", func() { ctrl.Log.WithName("setup").Info("manager line") }, "manager line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			buf.Reset()
			tc.log()
			klog.Flush()
			out := strings.TrimSpace(buf.String())
			g.Expect(out).NotTo(BeEmpty(), "the line reached the manager's writer")
			for _, line := range strings.Split(out, "\n") {
				var m map[string]any
				g.Expect(json.Unmarshal([]byte(line), &m)).To(Succeed(), "not JSON: %q", line)
				g.Expect(m).To(HaveKeyWithValue("msg", tc.msg))
			}
		})
	}
}
