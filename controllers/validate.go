package controllers

import (
	"fmt"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// Validate checks a LoadBalancer with no I/O: the rules the CRD's CEL already enforces at
// admission (repeated here because objects may predate a rule, and because unit tests and other
// callers do not pass through the API server), plus what CEL cannot express: label-selector
// syntax, duration relations with defaults applied, whether this build has the backend, and the
// backend's own rules. Every error names the field and the fix. The reconciler sets Ready False,
// reason InvalidSpec, with the aggregated message and touches nothing else except releasing
// members that are being deleted.
func Validate(lb *lbv1.LoadBalancer, reg *providers.Registry) field.ErrorList {
	var errs field.ErrorList
	spec := &lb.Spec
	sp := field.NewPath("spec")

	tk := spec.TargetKind
	switch {
	case tk.Kind == "" && tk.APIGroup == "", tk.Kind == lbv1.MachineKind && tk.APIGroup == lbv1.MachineAPIGroup:
		if spec.ClusterName == "" {
			errs = append(errs, field.Required(sp.Child("clusterName"),
				"required when spec.targetKind.kind is Machine: set it to the name of the Cluster whose control plane this LoadBalancer fronts"))
		}
	case tk.Kind == lbv1.NodeKind && tk.APIGroup == "":
	default:
		errs = append(errs, field.Invalid(sp.Child("targetKind"), fmt.Sprintf("%s/%s", tk.APIGroup, tk.Kind),
			`must be {apiGroup: cluster.x-k8s.io, kind: Machine} or {apiGroup: "", kind: Node}`))
	}
	if n := spec.ClusterName; n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(sp.Child("clusterName"), n, msg))
		}
		if len(n) > 63 {
			errs = append(errs, field.TooLong(sp.Child("clusterName"), n, 63))
		}
	}

	if spec.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(spec.Selector,
			metav1validation.LabelSelectorValidationOptions{}, sp.Child("selector"))...)
	}

	if h := spec.Endpoint.Host; h != "" && !lbv1.ValidHost(h) {
		errs = append(errs, field.Invalid(sp.Child("endpoint", "host"), h,
			"must be an IP address (10.0.0.10, fd00::10) or a lower-case DNS name (api.example.com), without scheme or port"))
	}
	errs = append(errs, validPort(sp.Child("endpoint", "port"), spec.Endpoint.Port, true)...)
	errs = append(errs, validPort(sp.Child("targetPort"), spec.TargetPort, true)...)

	hc := spec.HealthCheck
	errs = append(errs, hc.Interval.ValidateForm(sp.Child("healthCheck", "interval"))...)
	errs = append(errs, hc.Timeout.ValidateForm(sp.Child("healthCheck", "timeout"))...)
	errs = append(errs, spec.Quiesce.DrainPeriod.ValidateForm(sp.Child("quiesce", "drainPeriod"))...)
	errs = append(errs, spec.Quiesce.Timeout.ValidateForm(sp.Child("quiesce", "timeout"))...)
	if hc.Interval.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("healthCheck", "interval"), hc.Interval.Duration.String(), "must not be negative"))
	}
	if hc.Timeout.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("healthCheck", "timeout"), hc.Timeout.Duration.String(), "must not be negative"))
	}
	if !hc.Disabled && hc.EffectiveTimeout() > hc.EffectiveInterval() {
		errs = append(errs, field.Invalid(sp.Child("healthCheck", "timeout"), hc.EffectiveTimeout().String(),
			fmt.Sprintf("must not exceed spec.healthCheck.interval (%s): shorten the timeout or probe less often", hc.EffectiveInterval())))
	}
	q := spec.Quiesce
	if q.DrainPeriod != nil && q.DrainPeriod.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("quiesce", "drainPeriod"), q.DrainPeriod.Duration.String(), "must not be negative"))
	}
	if q.Timeout.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("quiesce", "timeout"), q.Timeout.Duration.String(), "must not be negative"))
	}
	if q.Timeout.Duration > lbv1.MaxQuiesceTimeout {
		errs = append(errs, field.Invalid(sp.Child("quiesce", "timeout"), q.Timeout.Duration.String(),
			fmt.Sprintf("must be at most %s: caplb never holds a Machine's deletion longer", lbv1.MaxQuiesceTimeout)))
	}
	if q.DrainPeriod != nil && q.DrainPeriod.Duration > lbv1.MaxDrainPeriod {
		errs = append(errs, field.Invalid(sp.Child("quiesce", "drainPeriod"), q.DrainPeriod.Duration.String(),
			fmt.Sprintf("must be at most %s", lbv1.MaxDrainPeriod)))
	}
	if q.EffectiveDrainPeriod() > q.EffectiveTimeout() {
		errs = append(errs, field.Invalid(sp.Child("quiesce", "drainPeriod"), q.EffectiveDrainPeriod().String(),
			fmt.Sprintf("must not exceed spec.quiesce.timeout (%s): raise the timeout or shorten the drain period", q.EffectiveTimeout())))
	}

	errs = append(errs, validateTakeOverSpec(lb)...)

	kind := spec.Backend.Kind()
	if kind == "" {
		return append(errs, field.Required(sp.Child("backend"),
			fmt.Sprintf("set exactly one backend; this build supports: %v", reg.Kinds())))
	}
	b, err := reg.Get(kind)
	if err != nil {
		return append(errs, field.NotSupported(sp.Child("backend"), kind, reg.Kinds()))
	}
	return append(errs, b.Validate(lb)...)
}

func validPort(p *field.Path, port int32, optional bool) field.ErrorList {
	if port == 0 && optional {
		return nil
	}
	if port < 1 || port > 65535 {
		return field.ErrorList{field.Invalid(p, port, "must be a TCP port between 1 and 65535")}
	}
	return nil
}
