package monitoring

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// The code that registers caplb's metrics: the manager (controllers, providers), the node
// agent (modes: agent, arp, bgp), the WireGuard gateway (modes/wireguard) and what every binary shares (internal: caplb_build_info).
var metricDirs = []string{"controllers", "providers", "modes", "cmd", "internal"}

var metricRef = regexp.MustCompile(`\bcaplb_[a-zA-Z0-9_]+`)

type rules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func loadCodeMetrics(t *testing.T) map[string]metricKind {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m, err := codeMetrics(root, metricDirs...)
	if err != nil {
		t.Fatalf("reading the metrics the code registers: %v", err)
	}
	return m
}

// known reports whether ref names a series the code exports: a metric's own name, or for a
// histogram or summary one of its _bucket/_sum/_count series.
func known(code map[string]metricKind, ref string) bool {
	if _, ok := code[ref]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(ref, suffix); ok {
			if k := code[base]; k == "Histogram" || (k == "Summary" && suffix != "_bucket") {
				return true
			}
		}
	}
	return false
}

// The scanner itself finds the metrics of each part, in each way they are named.
func TestCodeMetricsScanner(t *testing.T) {
	g := NewWithT(t)
	code := loadCodeMetrics(t)
	g.Expect(code).To(HaveKeyWithValue("caplb_loadbalancer_ready", metricKind("Gauge")))                          // a constant
	g.Expect(code).To(HaveKeyWithValue("caplb_loadbalancer_reconcile_duration_seconds", metricKind("Histogram"))) // a constant
	g.Expect(code).To(HaveKeyWithValue("caplb_agent_owner", metricKind("Gauge")))                                 // a helper closure
	g.Expect(code).To(HaveKeyWithValue("caplb_agent_transitions_total", metricKind("Counter")))                   // a literal
	g.Expect(code).To(HaveKeyWithValue("caplb_agent_duplicate_owners", metricKind("Gauge")))                      // a GaugeFunc
	g.Expect(code).To(HaveKeyWithValue("caplb_bgp_session_up", metricKind("Gauge")))                              // bgp
	g.Expect(code).To(HaveKeyWithValue("caplb_wireguard_member_healthy", metricKind("Desc")))                     // a collector's NewDesc
	for name := range code {
		g.Expect(name).To(HavePrefix("caplb_"), "metrics caplb registers are named caplb_*")
	}
	g.Expect(known(code, "caplb_loadbalancer_reconcile_duration_seconds_bucket")).To(BeTrue())
	g.Expect(known(code, "caplb_loadbalancer_ready_bucket")).To(BeFalse())
	g.Expect(known(code, "caplb_no_such_metric")).To(BeFalse())
}

func TestAlertRules(t *testing.T) {
	g := NewWithT(t)
	code := loadCodeMetrics(t)
	data, err := os.ReadFile("alerts.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var r rules
	g.Expect(yaml.UnmarshalStrict(data, &r)).To(Succeed())
	g.Expect(r.Groups).NotTo(BeEmpty())
	seen := map[string]bool{}
	for _, grp := range r.Groups {
		g.Expect(grp.Name).NotTo(BeEmpty())
		g.Expect(grp.Rules).NotTo(BeEmpty(), grp.Name)
		for _, rule := range grp.Rules {
			g.Expect(rule.Alert).To(MatchRegexp(`^Caplb[A-Za-z]+$`), "alert names start with Caplb")
			g.Expect(seen[rule.Alert]).To(BeFalse(), "duplicate alert %s", rule.Alert)
			seen[rule.Alert] = true
			g.Expect(rule.Labels).To(HaveKeyWithValue("severity", BeElementOf("warning", "critical")), rule.Alert)
			g.Expect(rule.Annotations).To(HaveKey("summary"), rule.Alert)
			if rule.For != "" {
				_, err := time.ParseDuration(rule.For)
				g.Expect(err).NotTo(HaveOccurred(), "%s: for %q", rule.Alert, rule.For)
			}
			expectBalanced(g, rule.Alert, rule.Expr)
			refs := metricRef.FindAllString(rule.Expr, -1)
			g.Expect(refs).NotTo(BeEmpty(), "%s queries no caplb metric", rule.Alert)
			for _, m := range refs {
				g.Expect(known(code, m)).To(BeTrue(), "alert %s queries %s, which no code registers", rule.Alert, m)
			}
		}
	}
}

func TestDashboard(t *testing.T) {
	g := NewWithT(t)
	code := loadCodeMetrics(t)
	data, err := os.ReadFile("dashboard.json")
	g.Expect(err).NotTo(HaveOccurred())
	var d dashboard
	g.Expect(json.Unmarshal(data, &d)).To(Succeed())
	g.Expect(d.UID).NotTo(BeEmpty())
	ids := map[int]bool{}
	used := map[string]bool{}
	check := func(where, expr string) {
		expectBalanced(g, where, expr)
		for _, m := range metricRef.FindAllString(expr, -1) {
			g.Expect(known(code, m)).To(BeTrue(), "%s queries %s, which no code registers", where, m)
			used[strings.TrimSuffix(m, "_bucket")] = true
		}
	}
	for _, p := range d.Panels {
		g.Expect(ids[p.ID]).To(BeFalse(), "duplicate panel id %d", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		g.Expect(p.Targets).NotTo(BeEmpty(), "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			g.Expect(tg.Expr).NotTo(BeEmpty(), "panel %q", p.Title)
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok {
			check("variable "+v.Name, q)
		}
	}
	// Every metric the code exports is on the dashboard: a new metric comes with its panel.
	var missing []string
	for name := range code {
		if !used[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	g.Expect(missing).To(BeEmpty(), "metrics registered by the code but on no panel of config/monitoring/dashboard.json")
}

// expectBalanced catches the commonest PromQL typo, an unclosed bracket.
func expectBalanced(g Gomega, where, expr string) {
	var stack []rune
	pairs := map[rune]rune{')': '(', '}': '{', ']': '['}
	inQuote := false
	for _, r := range expr {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, r)
		case pairs[r] != 0:
			g.Expect(stack).NotTo(BeEmpty(), "%s: unbalanced %q in %s", where, r, expr)
			if len(stack) > 0 {
				g.Expect(stack[len(stack)-1]).To(Equal(pairs[r]), "%s: mismatched %q in %s", where, r, expr)
				stack = stack[:len(stack)-1]
			}
		}
	}
	g.Expect(stack).To(BeEmpty(), "%s: unclosed bracket in %s", where, expr)
	g.Expect(inQuote).To(BeFalse(), "%s: unclosed quote in %s", where, expr)
}
