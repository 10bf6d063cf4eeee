package monitoring

import (
	"os"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// An aggregate compared with zero ("no member owns the VIP") says nothing once the series it
// sums vanish: a sum over no series is no result, not 0. Such an alert must also fire on the
// series' absence and on their targets being down.
var sumIsZero = regexp.MustCompile(`sum by \(job\) \((caplb_[a-z_]+)\) == 0`)

func TestZeroSumAlertsCoverVanishedSeries(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile("alerts.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var r rules
	g.Expect(yaml.UnmarshalStrict(data, &r)).To(Succeed())
	checked := map[string]bool{}
	for _, grp := range r.Groups {
		for _, rule := range grp.Rules {
			m := sumIsZero.FindStringSubmatch(rule.Expr)
			if m == nil {
				continue
			}
			checked[rule.Alert] = true
			metric := regexp.QuoteMeta(m[1])
			g.Expect(rule.Expr).To(MatchRegexp(`\bor absent\(`+metric+`\)`),
				"%s: no series at all must fire too (or absent(%s))", rule.Alert, m[1])
			g.Expect(rule.Expr).To(MatchRegexp(`\bor \(sum by \(job\) \(up\) == 0 and on \(job\) group by \(job\) \(max_over_time\(`+metric+`\[[0-9]+[dh]\]\)\)\)`),
				"%s: a job whose agents are all down (their series stale) must fire too", rule.Alert)
		}
	}
	// The rule the issue names is among those checked, so the check cannot pass by matching none.
	g.Expect(checked).To(HaveKey("CaplbVIPNoOwner"))
}

// Each agent's own alerts go quiet when it is not scraped; CaplbAgentDown covers that, limited to
// targets that exported caplb agent series (other jobs' up == 0 is not caplb's to report).
func TestAgentDownAlert(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile("alerts.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var r rules
	g.Expect(yaml.UnmarshalStrict(data, &r)).To(Succeed())
	var expr string
	for _, grp := range r.Groups {
		for _, rule := range grp.Rules {
			if rule.Alert == "CaplbAgentDown" {
				expr = rule.Expr
			}
		}
	}
	g.Expect(expr).To(MatchRegexp(`^up == 0 and on \(job, instance\) group by \(job, instance\) \(max_over_time\(caplb_agent_[a-z_]+\[[0-9]+[dh]\]\)\)\s*$`))
}
