package lifecycle

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestDecisionLines(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "n2-agent.log")
	log := `{"logger":"","ts":"2026-11-29T12:40:38.559284Z","level":0,"msg":"became owner: VIPs added and announced","reason":"n2 is the most preferred","vips":["10.0.0.1"]}
not json
{"logger":"election/memberlist","ts":"2026-11-29T12:40:39.000000Z","level":0,"msg":"[WARN] memberlist: Refuting a suspect message (from: n1)"}
{"logger":"election","ts":"2026-11-29T12:40:40.000000Z","level":0,"msg":"member down (dead or left)","member":"n1","address":"10.0.0.11"}
`
	g.Expect(os.WriteFile(path, []byte(log), 0o600)).To(Succeed())
	g.Expect(decisionLines(path, "n2")).To(Equal([]string{
		"2026-11-29T12:40:38.559284Z n2 became owner: VIPs added and announced reason=n2 is the most preferred",
		"2026-11-29T12:40:40.000000Z n2 member down (dead or left) address=10.0.0.11 member=n1",
	}))
	g.Expect(decisionLines(filepath.Join(t.TempDir(), "missing"), "n2")).To(BeEmpty())
}
