package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// validateTakeOverSpec is Validate's part for spec.takeOverEndpointFrom: what the LoadBalancer
// alone must satisfy (CEL says the same at admission; objects may predate the rules).
func validateTakeOverSpec(lb *lbv1.LoadBalancer) field.ErrorList {
	t := lb.Spec.TakeOverEndpointFrom
	if t == nil {
		return nil
	}
	fp := field.NewPath("spec", "takeOverEndpointFrom")
	var errs field.ErrorList
	switch {
	case t.Name == "":
		errs = append(errs, field.Required(fp.Child("name"), "name the LoadBalancer (in this namespace) that publishes the Cluster's endpoint now"))
	case t.Name == lb.Name:
		errs = append(errs, field.Invalid(fp.Child("name"), t.Name, "names this LoadBalancer itself: name the one that publishes the Cluster's endpoint now"))
	}
	switch t.CertSANs {
	case "", lbv1.CertSANsReport, lbv1.CertSANsAddToControlPlane:
	default:
		errs = append(errs, field.NotSupported(fp.Child("certSANs"), t.CertSANs,
			[]lbv1.CertSANsPolicy{lbv1.CertSANsReport, lbv1.CertSANsAddToControlPlane}))
	}
	if lb.Spec.ClusterName == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "clusterName"),
			"required with spec.takeOverEndpointFrom: an endpoint moves between two LoadBalancers of the same Cluster"))
	}
	if lb.Spec.PublishesClusterEndpoint() {
		errs = append(errs, field.Invalid(field.NewPath("spec", "publishClusterEndpoint"), lb.Spec.PublishesClusterEndpoint(),
			"must be false while spec.takeOverEndpointFrom is set: the old LoadBalancer publishes until the move switches the Cluster (caplb then sets it true)"))
	}
	return errs
}

// ValidateTakeOver checks, with no I/O, that old (nil when it does not exist) may hand the
// Cluster's endpoint over to lb: it is the one the admission webhook applies when the field is
// set and the one the reconciler applies before the switch (after it, the old LoadBalancer no
// longer publishes, by design). Every error names spec.takeOverEndpointFrom.name and the fix;
// none quotes another field of the old LoadBalancer, because the webhook's caller is not
// authenticated (publisher_webhook.go).
func ValidateTakeOver(lb, old *lbv1.LoadBalancer) field.ErrorList {
	t := lb.Spec.TakeOverEndpointFrom
	if t == nil {
		return nil
	}
	fp := field.NewPath("spec", "takeOverEndpointFrom", "name")
	invalid := func(format string, a ...any) field.ErrorList {
		return field.ErrorList{field.Invalid(fp, t.Name, fmt.Sprintf(format, a...))}
	}
	switch {
	case old == nil:
		return invalid("no LoadBalancer %s in namespace %s: name the LoadBalancer of Cluster %s that publishes its endpoint now (kubectl get lb -n %s)",
			t.Name, lb.Namespace, lb.Spec.ClusterName, lb.Namespace)
	case old.Namespace != lb.Namespace:
		return invalid("LoadBalancer %s is in namespace %s, not %s: an endpoint moves between LoadBalancers of one Cluster, which share its namespace",
			old.Name, old.Namespace, lb.Namespace)
	case old.Spec.ClusterName != lb.Spec.ClusterName:
		return invalid("LoadBalancer %s does not front Cluster %s: name a LoadBalancer of this LoadBalancer's Cluster",
			old.Name, lb.Spec.ClusterName)
	case !old.DeletionTimestamp.IsZero():
		return invalid("LoadBalancer %s is being deleted: its endpoint goes with it; create this LoadBalancer as the publisher instead", old.Name)
	case !old.Spec.PublishesClusterEndpoint():
		return invalid("LoadBalancer %s does not publish Cluster %s's endpoint (spec.publishClusterEndpoint false): name the one that does",
			old.Name, lb.Spec.ClusterName)
	case old.Spec.TakeOverEndpointFrom != nil:
		return invalid("LoadBalancer %s is itself taking the endpoint over: wait until that move is done", old.Name)
	case old.Spec.Endpoint.Host != "" && old.Spec.Endpoint.Host == lb.Spec.Endpoint.Host &&
		old.Spec.EffectivePort() == lb.Spec.EffectivePort():
		return invalid("LoadBalancer %s serves the same endpoint %s:%d: a move needs a new endpoint", old.Name,
			lb.Spec.Endpoint.Host, lb.Spec.EffectivePort())
	}
	return nil
}
