package ruletest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// operatorDir is config/monitoring/operator.
var operatorDir = filepath.Join("..", "operator")

// Each of config/monitoring/operator's objects decodes strictly into the Prometheus Operator's
// own type (v0.95.2): no field the operator does not know, none misplaced. config/monitoring's
// own test checks what they select; this one, that the operator reads them as written.
func TestOperatorObjectsDecodeStrictly(t *testing.T) {
	for file, obj := range map[string]any{
		"servicemonitor.yaml": &monitoringv1.ServiceMonitor{},
		"podmonitor.yaml":     &monitoringv1.PodMonitor{},
		"prometheusrule.yaml": &monitoringv1.PrometheusRule{},
	} {
		t.Run(file, func(t *testing.T) {
			g := NewWithT(t)
			b, err := os.ReadFile(filepath.Join(operatorDir, file))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(yaml.UnmarshalStrict(b, obj)).To(Succeed())
			g.Expect(string(b)).To(ContainSubstring("apiVersion: " + monitoringv1.SchemeGroupVersion.String()))
		})
	}
}

// The PrometheusRule's groups are rules Prometheus loads and evaluates as alerts.yaml's: written
// out as a rule file they load, and the same case fires the same alerts.
func TestPrometheusRuleEvaluatesLikeAlertsYAML(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile(filepath.Join(operatorDir, "prometheusrule.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var pr monitoringv1.PrometheusRule
	g.Expect(yaml.UnmarshalStrict(b, &pr)).To(Succeed())
	ruleFile, err := yaml.Marshal(pr.Spec)
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "prometheusrule-groups.yaml")
	g.Expect(os.WriteFile(path, ruleFile, 0o600)).To(Succeed())
	g.Expect(strings.Count(string(ruleFile), "alert: ")).To(BeNumerically(">", 10))

	down := seriesText(agents([3]string{"1x10 stale", "0x10 stale", "0x10 stale"}, [3]string{"1x10 0x20", "1x10 0x20", "1x10 0x20"})...)
	fromRule, err := firing(down, 20*time.Minute, path)
	g.Expect(err).NotTo(HaveOccurred())
	fromFile, err := firing(down, 20*time.Minute, alertsFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fromRule).To(Equal(fromFile))
	g.Expect(fromRule).NotTo(BeEmpty())
}
