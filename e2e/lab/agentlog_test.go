package lab

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestAgentDecisions: only the lines that say who holds the VIP and why, from since on, with
// their keys; memberlist's chatter, other processes' lines and earlier lines are left out, and
// two agents' lines merge in time order.
func TestAgentDecisions(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	n1 := `{"logger":"","ts":"2026-11-29T12:40:37.000000Z","level":0,"msg":"released the VIPs","reason":"before since"}
{"logger":"","ts":"2026-11-29T12:40:39.500000Z","level":0,"msg":"released the VIPs","reason":"handed over to n2 (quiescing)"}
`
	n2 := `{"logger":"","ts":"2026-11-29T12:40:38.559284Z","level":0,"msg":"became owner: VIPs added and announced","reason":"n2 is the most preferred","vips":["10.0.0.1"]}
=== 2026-11-29T12:40:38.6Z exit: signal: killed
{"logger":"election/memberlist","ts":"2026-11-29T12:40:39.000000Z","level":0,"msg":"[WARN] memberlist: Refuting a suspect message (from: n1)"}
{"logger":"election","ts":"2026-11-29T12:40:40.000000Z","level":0,"msg":"member down (dead or left)","member":"n1","address":"10.0.0.11"}
`
	logs := map[string]string{"n1": filepath.Join(dir, "n1.log"), "n2": filepath.Join(dir, "n2.log"), "n3": filepath.Join(dir, "missing")}
	g.Expect(os.WriteFile(logs["n1"], []byte(n1), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(logs["n2"], []byte(n2), 0o600)).To(Succeed())
	since := time.Date(2026, 11, 29, 12, 40, 38, 0, time.UTC)
	g.Expect(MergeAgentDecisions(logs, since)).To(Equal(
		"2026-11-29T12:40:38.559284Z n2 became owner: VIPs added and announced reason=n2 is the most preferred\n" +
			"2026-11-29T12:40:39.500000Z n1 released the VIPs reason=handed over to n2 (quiescing)\n" +
			"2026-11-29T12:40:40.000000Z n2 member down (dead or left) address=10.0.0.11 member=n1"))
	g.Expect(IsAgentDecision("health check failed")).To(BeTrue())
	g.Expect(IsAgentDecision("[WARN] memberlist: Refuting a suspect message")).To(BeFalse())
}
