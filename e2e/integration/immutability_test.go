package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Immutability holds when a field is removed or zeroed too: the API server skips a transition
// rule on an optional field that the update removes, so removing spec.endpoint used to be admitted
// and move a published endpoint. Bounds that keep a spec from holding a Machine for ever, and the
// format of clusterName, are checked at admission.
func testImmutability(t *testing.T, s *suite) {
	ctx := t.Context()
	ns, err := s.env.CreateNamespace(ctx, "immutable")
	if err != nil {
		t.Fatal(err)
	}
	updates := []struct {
		name   string
		mutate func(spec map[string]any)
		want   []string
	}{
		{"remove spec.endpoint", func(s map[string]any) { delete(s, "endpoint") },
			[]string{"spec.endpoint.host cannot change", "removing it is a change too"}},
		{"remove endpoint host", func(s map[string]any) { delete(s["endpoint"].(map[string]any), "host") },
			[]string{"spec.endpoint.host cannot change"}},
		{"zero endpoint port", func(s map[string]any) { s["endpoint"].(map[string]any)["port"] = int64(0) },
			[]string{"spec.endpoint.port"}},
		{"remove endpoint port", func(s map[string]any) { delete(s["endpoint"].(map[string]any), "port") },
			[]string{"spec.endpoint.port cannot change"}},
		{"remove clusterName", func(s map[string]any) { delete(s, "clusterName") },
			[]string{"spec.clusterName"}},
	}
	for i, tc := range updates {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := "imm-" + string(rune('a'+i))
			g.Expect(s.env.Client.Create(ctx, lbObject(ns, name, validSpec()))).To(Succeed())
			err := updateLBSpec(ctx, s, ns, name, tc.mutate)
			g.Expect(err).To(HaveOccurred(), "the API server accepted the update")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}

	creates := []struct {
		name   string
		mutate func(spec map[string]any)
		want   []string
	}{
		{"clusterName not a Cluster name", func(s map[string]any) { s["clusterName"] = "My_Cluster" },
			[]string{"spec.clusterName", "must be a Cluster name"}},
		{"quiesce timeout beyond 1h", func(s map[string]any) { s["quiesce"] = map[string]any{"timeout": "2h"} },
			[]string{"spec.quiesce", "at most 1h"}},
		{"drain period beyond 30m", func(s map[string]any) {
			s["quiesce"] = map[string]any{"timeout": "1h", "drainPeriod": "45m"}
		}, []string{"spec.quiesce", "at most 30m"}},
	}
	for _, tc := range creates {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := validSpec()
			tc.mutate(spec)
			err := s.env.Client.Create(ctx, lbObject(ns, "bad", spec), client.FieldValidation("Strict"))
			g.Expect(err).To(HaveOccurred(), "the API server accepted it")
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
	// The bounds themselves are accepted.
	spec := validSpec()
	spec["quiesce"] = map[string]any{"timeout": "1h", "drainPeriod": "30m"}
	NewWithT(t).Expect(s.env.Client.Create(ctx, lbObject(ns, "bounds", spec), client.FieldValidation("Strict"))).To(Succeed())
}
