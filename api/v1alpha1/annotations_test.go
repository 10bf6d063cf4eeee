package v1alpha1

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func TestPreDrainHookAnnotation(t *testing.T) {
	g := NewWithT(t)
	short := PreDrainHookAnnotation("prod-cp")
	g.Expect(short).To(Equal(clusterv1.PreDrainDeleteHookAnnotationPrefix + "/caplb-prod-cp"))

	long := strings.Repeat("a", 253)
	for _, name := range []string{"prod-cp", strings.Repeat("b", 57), strings.Repeat("b", 58), long} {
		key := PreDrainHookAnnotation(name)
		g.Expect(validation.IsQualifiedName(key)).To(BeEmpty(), "key for %d-character name must be a valid annotation key", len(name))
		g.Expect(strings.HasPrefix(key, clusterv1.PreDrainDeleteHookAnnotationPrefix)).To(BeTrue())
	}
	g.Expect(PreDrainHookAnnotation(long+"x")).NotTo(Equal(PreDrainHookAnnotation(long)), "hashed names stay distinct")
}

func TestTargetStateInRotation(t *testing.T) {
	g := NewWithT(t)
	g.Expect(TargetAdding.InRotation()).To(BeTrue())
	g.Expect(TargetActive.InRotation()).To(BeTrue())
	for _, s := range []TargetState{TargetDisabling, TargetDisabled, TargetRemoving, TargetRemoved} {
		g.Expect(s.InRotation()).To(BeFalse(), string(s))
	}
}

func TestEffectiveDefaults(t *testing.T) {
	g := NewWithT(t)
	var spec LoadBalancerSpec
	g.Expect(spec.EffectiveTargetPort()).To(Equal(int32(6443)))
	g.Expect(spec.EffectivePort()).To(Equal(int32(6443)))
	spec.TargetPort = 6444
	g.Expect(spec.EffectivePort()).To(Equal(int32(6444)))
	spec.Endpoint.Port = 443
	g.Expect(spec.EffectivePort()).To(Equal(int32(443)))
	g.Expect(spec.HealthCheck.EffectiveInterval()).To(Equal(10 * time.Second))
	g.Expect(spec.HealthCheck.EffectiveTimeout()).To(Equal(2 * time.Second))
	g.Expect(spec.Quiesce.EffectiveDrainPeriod()).To(Equal(10*time.Second), "unset drain period takes the default")
	spec.Quiesce.DrainPeriod = &Duration{}
	g.Expect(spec.Quiesce.EffectiveDrainPeriod()).To(BeZero(), "an explicit 0s means no drain")
	g.Expect(spec.Quiesce.EffectiveTimeout()).To(Equal(2 * time.Minute))
	g.Expect(TargetKind{}.IsNode()).To(BeFalse(), "empty kind means Machine")
	g.Expect(TargetKind{Kind: NodeKind}.IsNode()).To(BeTrue())
	g.Expect(APIEndpoint{Host: "h"}.IsValid()).To(BeFalse())
	g.Expect(APIEndpoint{}.IsZero()).To(BeTrue())
}
