package controllers

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// The validating webhook of LoadBalancers, served by the manager. config/webhook registers it
// (keep the path and name in sync: hack/release's tests check them).
const (
	// ValidatingWebhookPath is where the manager's webhook server serves PublisherValidator.
	ValidatingWebhookPath = "/validate-loadbalancer-cluster-x-k8s-io-v1alpha1-loadbalancer"
	// ValidatingWebhookName is the webhook's name in the ValidatingWebhookConfiguration.
	ValidatingWebhookName = "vloadbalancer.loadbalancer.cluster.x-k8s.io"
)

// PublisherValidator refuses, at admission, a LoadBalancer that would become a second publisher
// of its Cluster's endpoint (clusterPublisher, the rule the reconciler applies). It is the early,
// clear refusal; the reconciler's check (ClusterEndpoint False AnotherPublisher) stays the
// backstop, because two LoadBalancers created at the same moment can both pass a webhook: each
// is admitted before the other is stored.
type PublisherValidator struct {
	// Reader lists the namespace's LoadBalancers. SetupWebhook gives it the manager's API reader,
	// not its cache: the cache learns of a new LoadBalancer only when the watch delivers it, and
	// the case this webhook exists for is two publishers applied from one manifest, milliseconds
	// apart — the cache would miss the first. The read is a namespace list (the API server cannot
	// select on spec.clusterName), made only when a LoadBalancer is created as a publisher or turned
	// into one, never for the manager's own finalizer and spec patches (config/webhook's
	// matchConditions skip them, and so does Handle).
	Reader client.Reader
	// Decoder decodes the request's objects.
	Decoder admission.Decoder
}

// SetupWebhook registers PublisherValidator on the manager's webhook server, which the manager
// then starts with its other runnables (it needs the serving certificate in the server's CertDir).
func SetupWebhook(mgr ctrl.Manager) {
	mgr.GetWebhookServer().Register(ValidatingWebhookPath, &admission.Webhook{Handler: &PublisherValidator{
		Reader:  mgr.GetAPIReader(),
		Decoder: admission.NewDecoder(mgr.GetScheme()),
	}})
}

// Handle admits or refuses one create or update of a LoadBalancer.
func (v *PublisherValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	lb := &lbv1.LoadBalancer{}
	if err := v.Decoder.Decode(req, lb); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the LoadBalancer: %w", err))
	}
	if !wantsToPublish(lb) {
		return admission.Allowed("")
	}
	if req.Operation == admissionv1.Update {
		old := &lbv1.LoadBalancer{}
		if err := v.Decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the stored LoadBalancer: %w", err))
		}
		// Already a publisher (clusterName is immutable): whatever else changes leaves the
		// publication as it was. Refusing here would also block the finalizer's removal of two
		// publishers that raced past this webhook.
		if wantsToPublish(old) {
			return admission.Allowed("")
		}
	}
	var list lbv1.LoadBalancerList
	if err := v.Reader.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return admission.Errored(http.StatusInternalServerError,
			fmt.Errorf("listing the LoadBalancers of namespace %s: %w", req.Namespace, err))
	}
	if errs := publisherConflicts(lb, list.Items); len(errs) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Refused a second publisher of a Cluster's endpoint", "LoadBalancer", req.Name,
			"namespace", req.Namespace, "cluster", lb.Spec.ClusterName)
		status := apierrors.NewInvalid(lbv1.GroupVersion.WithKind("LoadBalancer").GroupKind(), req.Name, errs).Status()
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
	}
	return admission.Allowed("")
}

// wantsToPublish reports whether lb asks to publish its Cluster's endpoint.
func wantsToPublish(lb *lbv1.LoadBalancer) bool {
	return lb.Spec.ClusterName != "" && lb.Spec.PublishesClusterEndpoint() && lb.DeletionTimestamp.IsZero()
}

// publisherConflicts is admission's view of clusterPublisher: lb, about to publish, joins the
// LoadBalancers of its namespace (lb's stored self excluded); it may only if its Cluster has no
// publisher yet.
func publisherConflicts(lb *lbv1.LoadBalancer, inNamespace []lbv1.LoadBalancer) field.ErrorList {
	var peers []*lbv1.LoadBalancer
	for i := range inNamespace {
		p := &inNamespace[i]
		if p.Spec.ClusterName == lb.Spec.ClusterName && p.Name != lb.Name {
			peers = append(peers, p)
		}
	}
	p := clusterPublisher(peers)
	if p == nil {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "publishClusterEndpoint"), fmt.Sprintf(
		"LoadBalancer %s already publishes the endpoint of Cluster %s; set spec.publishClusterEndpoint: false on this one "+
			"(it still holds its own hooks and serves its endpoint), or on %s first", p.Name, lb.Spec.ClusterName, p.Name))}
}
