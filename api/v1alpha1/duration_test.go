package v1alpha1

import (
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDurationDecodesEveryStoredValue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string
		want    time.Duration
		invalid string
	}{
		{"units", `"1m30s"`, 90 * time.Second, ""},
		{"fraction", `"1.5s"`, 1500 * time.Millisecond, ""},
		{"zero", `"0"`, 0, ""},
		{"negative decodes; admission and Validate refuse it", `"-5s"`, -5 * time.Second, ""},
		{"word", `"soon"`, 0, `"soon"`},
		{"no units", `"120"`, 0, `"120"`},
		{"overflow", `"999999999999h"`, 0, `"999999999999h"`},
		{"number", `10`, 0, `10`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var d Duration
			g.Expect(json.Unmarshal([]byte(tc.json), &d)).To(Succeed())
			g.Expect(d.Duration).To(Equal(tc.want))
			g.Expect(d.Invalid()).To(Equal(tc.invalid))
			out, err := json.Marshal(d)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.invalid != "" {
				g.Expect(string(out)).To(Equal(tc.json), "an invalid value is written back as it was read")
				g.Expect(d.ValidateForm(field.NewPath("spec", "x"))).To(ConsistOf(
					HaveField("Field", "spec.x")))
			} else {
				g.Expect(d.ValidateForm(field.NewPath("spec", "x"))).To(BeEmpty())
			}
		})
	}
}

// One LoadBalancer whose duration was stored before admission refused it must not fail the
// decode of a whole list: that is what stopped every tenant's reconciles.
func TestListWithAnUnparsableDurationDecodes(t *testing.T) {
	g := NewWithT(t)
	list := `{"items":[
		{"metadata":{"name":"bad"},"spec":{"backend":{"static":{}},"healthCheck":{"interval":"soon"},"quiesce":{"drainPeriod":"later"}}},
		{"metadata":{"name":"good"},"spec":{"backend":{"static":{}},"healthCheck":{"interval":"5s"}}}]}`
	var l LoadBalancerList
	g.Expect(json.Unmarshal([]byte(list), &l)).To(Succeed())
	g.Expect(l.Items).To(HaveLen(2))
	g.Expect(l.Items[0].Spec.HealthCheck.Interval.Invalid()).To(Equal(`"soon"`))
	g.Expect(l.Items[0].Spec.Quiesce.DrainPeriod.Invalid()).To(Equal(`"later"`))
	g.Expect(l.Items[1].Spec.HealthCheck.Interval.Duration).To(Equal(5 * time.Second))

	cp := l.Items[0].DeepCopy()
	g.Expect(cp.Spec.HealthCheck.Interval.Invalid()).To(Equal(`"soon"`), "DeepCopy keeps the raw value")
}

func TestDurationNilIsValid(t *testing.T) {
	var d *Duration
	NewWithT(t).Expect(d.ValidateForm(field.NewPath("spec"))).To(BeEmpty())
	NewWithT(t).Expect(d.Meta()).To(BeNil())
}
