package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// DefaultMaxLiveReads bounds PublisherValidator's concurrent live LISTs when MaxLiveReads is
// unset. Legitimate admissions are rare (a publisher's create or switch), so a few slots serve
// them; a slot is held for one namespace LIST only.
const DefaultMaxLiveReads = 4

// liveReadTimeout frees a slot even when a caller holds its connection open: it is below the
// configuration's timeoutSeconds (10), after which the API server gives up on the answer anyway.
const liveReadTimeout = 8 * time.Second

// PublisherValidator refuses, at admission, a LoadBalancer that would become a second publisher
// of its Cluster's endpoint (clusterPublisher, the rule the reconciler applies). It is the early,
// clear refusal; the reconciler's check (ClusterEndpoint False AnotherPublisher) stays the
// backstop, because two LoadBalancers created at the same moment can both pass a webhook: each
// is admitted before the other is stored.
//
// The webhook server does not authenticate its caller: anyone who reaches :9443 can send an
// AdmissionReview, for any namespace. Hence the bounded live reads (MaxLiveReads), a namespace
// that must be named and match the object's (never a cluster-wide list), and denials that name
// no stored object (docs/install.md, Restricting who reaches the webhook).
type PublisherValidator struct {
	// Reader lists the namespace's LoadBalancers. SetupWebhook gives it the manager's API reader,
	// not its cache: the cache learns of a new LoadBalancer only when the watch delivers it, and
	// the case this webhook exists for is two publishers applied from one manifest, milliseconds
	// apart — the cache would miss the first. (A cached "conflict" could skip the live read, but
	// a forged review need not conflict, so that bounds nothing the semaphore does not, and a
	// lagging cache would refuse a successor created right after its predecessor's delete.)
	// The read is a namespace list: the API server cannot select on spec.clusterName, and a
	// cluster-name label is not on every LoadBalancer (a selector would miss unlabelled
	// publishers). It is made only when a LoadBalancer is created as a publisher or turned into
	// one, never for the manager's own finalizer and spec patches (config/webhook's
	// matchConditions skip them, and so does Handle).
	Reader client.Reader
	// Decoder decodes the request's objects.
	Decoder admission.Decoder
	// MaxLiveReads bounds the live LISTs in flight at once (0: DefaultMaxLiveReads). A review
	// beyond it is refused at once (429 with Retry-After, which client-go retries), not queued:
	// the LIST is uncached and runs under the manager's own API Priority and Fairness flow, so an
	// unbounded number would let any caller of :9443 load the API server and starve the
	// manager's reconcilers. Refusing is the closed side, as failurePolicy Fail is.
	MaxLiveReads int

	slotsOnce sync.Once
	slots     chan struct{} // the semaphore: a buffered channel of MaxLiveReads tokens
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
	if !wantsToPublish(lb) && lb.Spec.TakeOverEndpointFrom == nil {
		return admission.Allowed("")
	}
	// The API server always names the namespace and fills it into the object. Without one the
	// list would span every namespace; with two, the caller could list one and be judged as
	// the other.
	if req.Namespace == "" {
		return admission.Errored(http.StatusBadRequest, errors.New("the review names no namespace; LoadBalancers are namespaced"))
	}
	if lb.Namespace != "" && lb.Namespace != req.Namespace {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the LoadBalancer's namespace %s is not the request's, %s", lb.Namespace, req.Namespace))
	}
	lb.Namespace = req.Namespace
	var stored *lbv1.LoadBalancer
	if req.Operation == admissionv1.Update {
		stored = &lbv1.LoadBalancer{}
		if err := v.Decoder.DecodeRaw(req.OldObject, stored); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the stored LoadBalancer: %w", err))
		}
	}
	if startsTakeOver(req.Operation, lb, stored) {
		return v.admitTakeOver(ctx, req, lb)
	}
	if !wantsToPublish(lb) {
		return admission.Allowed("")
	}
	if old := stored; old != nil {
		// Already a publisher (clusterName is immutable): whatever else changes leaves the
		// publication as it was. Refusing here would also block the finalizer's removal of two
		// publishers that raced past this webhook.
		if wantsToPublish(old) {
			return admission.Allowed("")
		}
	}
	list, busy, err := v.listLive(ctx, req.Namespace)
	if busy {
		ctrl.LoggerFrom(ctx).V(1).Info("Refused an admission review: live reads at their bound", "LoadBalancer", req.Name,
			"namespace", req.Namespace, "bound", v.maxLiveReads())
		return tooManyReviews(v.maxLiveReads())
	}
	if err != nil {
		return admission.Errored(http.StatusInternalServerError,
			fmt.Errorf("listing the LoadBalancers of namespace %s: %w", req.Namespace, err))
	}
	if errs := publisherConflicts(lb, list); len(errs) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Refused a second publisher of a Cluster's endpoint", "LoadBalancer", req.Name,
			"namespace", req.Namespace, "cluster", lb.Spec.ClusterName)
		status := apierrors.NewInvalid(lbv1.GroupVersion.WithKind("LoadBalancer").GroupKind(), req.Name, errs).Status()
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
	}
	return admission.Allowed("")
}

func (v *PublisherValidator) maxLiveReads() int {
	if v.MaxLiveReads > 0 {
		return v.MaxLiveReads
	}
	return DefaultMaxLiveReads
}

// listLive lists namespace ns's LoadBalancers through Reader, holding one of the MaxLiveReads
// slots; busy when none is free (nothing was read).
func (v *PublisherValidator) listLive(ctx context.Context, ns string) (items []lbv1.LoadBalancer, busy bool, err error) {
	v.slotsOnce.Do(func() { v.slots = make(chan struct{}, v.maxLiveReads()) })
	select {
	case v.slots <- struct{}{}:
	default:
		return nil, true, nil
	}
	defer func() { <-v.slots }()
	ctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	var list lbv1.LoadBalancerList
	if err := v.Reader.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, false, err
	}
	return list.Items, false, nil
}

// tooManyReviews refuses a review beyond the live-read bound. The API server passes the code and
// RetryAfterSeconds on to the client as 429 and Retry-After, which client-go (kubectl, the
// LoadBalancerClass controller) retries by itself.
func tooManyReviews(bound int) admission.Response {
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: fmt.Sprintf("caplb's publisher webhook is already reading LoadBalancers for %d other reviews and refuses "+
			"rather than queues; retry in a moment", bound),
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}}}
}

// wantsToPublish reports whether lb asks to publish its Cluster's endpoint.
func wantsToPublish(lb *lbv1.LoadBalancer) bool {
	return lb.Spec.ClusterName != "" && lb.Spec.PublishesClusterEndpoint() && lb.DeletionTimestamp.IsZero()
}

// publisherConflicts is admission's view of clusterPublisher: lb, about to publish, joins the
// LoadBalancers of its namespace (lb's stored self excluded); it may only if its Cluster has no
// publisher yet. The refusal does not name the publisher: the caller may not be allowed to read
// the namespace (it is not authenticated), and one who is finds it with kubectl.
func publisherConflicts(lb *lbv1.LoadBalancer, inNamespace []lbv1.LoadBalancer) field.ErrorList {
	var peers []*lbv1.LoadBalancer
	for i := range inNamespace {
		p := &inNamespace[i]
		if p.Spec.ClusterName == lb.Spec.ClusterName && p.Name != lb.Name {
			peers = append(peers, p)
		}
	}
	if clusterPublisher(peers) == nil {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "publishClusterEndpoint"), fmt.Sprintf(
		"another LoadBalancer of Cluster %s already publishes its endpoint; set spec.publishClusterEndpoint: false on this one "+
			"(it still holds its own hooks and serves its endpoint), or on that one first (kubectl get loadbalancers -n %s "+
			"lists them with their Cluster)", lb.Spec.ClusterName, lb.Namespace))}
}
