package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// clusterConflictRetry is how soon a Cluster publication that lost an optimistic-lock race is
// retried.
const clusterConflictRetry = 200 * time.Millisecond

// clusterDecision is what to do with the Cluster's spec.controlPlaneEndpoint.
type clusterDecision int

const (
	// decideWait: we have no endpoint yet and the Cluster has none either.
	decideWait clusterDecision = iota
	// decidePublish: the Cluster has no endpoint: write ours (host and port together).
	decidePublish
	// decideInSync: the Cluster's endpoint equals ours.
	decideInSync
	// decideMismatch: the Cluster has another endpoint (or half of one): leave it, report it.
	decideMismatch
)

func clusterEndpointOf(c *clusterv1.Cluster) lbv1.APIEndpoint {
	return lbv1.APIEndpoint{Host: c.Spec.ControlPlaneEndpoint.Host, Port: c.Spec.ControlPlaneEndpoint.Port}
}

// decideClusterEndpoint is the pure publication rule. A Cluster endpoint is written only when it
// is entirely empty: CAPI treats "both or neither", and a half-set one is somebody's unfinished
// intent that caplb must not guess at.
func decideClusterEndpoint(theirs, ours lbv1.APIEndpoint) clusterDecision {
	switch {
	case theirs.IsZero() && ours.IsValid():
		return decidePublish
	case theirs.IsZero():
		return decideWait
	case theirs == ours:
		return decideInSync
	}
	return decideMismatch
}

// decideAdoption is the pure adoption rule, applied before the backend runs: when
// spec.endpoint.host is empty and the Cluster already has an endpoint that caplb did not put
// there, that endpoint becomes ours (written to spec.endpoint, so it persists and is immutable
// from then on). compared is true when the ClusterEndpoint condition says the Cluster was compared
// with our endpoint before: then a difference means our endpoint moved (static, host empty) or
// somebody edited the Cluster, and adopting would hide that — it is a mismatch instead. Two more
// refusals keep caplb from adopting its own guess as if a person had chosen it, which would pin a
// member's address for ever (a crash between the Cluster patch and the status patch loses the
// condition): publishedBy naming this LoadBalancer (self) or another one of the Cluster's
// (EndpointPublishedByAnnotation), and a host that is one of our members' addresses. The second result says why
// adoption is refused when it otherwise would apply.
func decideAdoption(spec, status, theirs lbv1.APIEndpoint, compared bool, publishedBy, self string, memberAddrs map[string]bool) (adopt bool, refusal string) {
	if spec.Host != "" || !theirs.IsValid() || theirs == status || compared {
		return false, ""
	}
	switch {
	case publishedBy != "" && publishedBy != self:
		return false, fmt.Sprintf("the Cluster's endpoint %s:%d was published by LoadBalancer %s (%s): it is that LoadBalancer's, not this one's", theirs.Host, theirs.Port, publishedBy, lbv1.EndpointPublishedByAnnotation)
	case publishedBy == self:
		return false, fmt.Sprintf("the Cluster's endpoint %s:%d was published by this LoadBalancer (%s): it is caplb's own choice, not a person's", theirs.Host, theirs.Port, lbv1.EndpointPublishedByAnnotation)
	case memberAddrs[theirs.Host]:
		return false, fmt.Sprintf("the Cluster's endpoint host %s is the address of one of this LoadBalancer's members: adopting it would pin that member for ever", theirs.Host)
	case spec.Port != 0 && spec.Port != theirs.Port:
		return false, fmt.Sprintf("the Cluster's endpoint %s:%d has another port than spec.endpoint.port (%d)", theirs.Host, theirs.Port, spec.Port)
	case !lbv1.ValidHost(theirs.Host):
		return false, fmt.Sprintf("the Cluster's endpoint host %q is not an IP address or lower-case DNS name", theirs.Host)
	}
	return true, ""
}

// reconcileAdoption adopts the Cluster's endpoint when decideAdoption says so. It runs once the
// members are gathered (their addresses are never adopted) and before the backend runs.
func (r *LoadBalancerReconciler) reconcileAdoption(ctx context.Context, s *scope) {
	if s.cluster == nil || !s.cluster.DeletionTimestamp.IsZero() || !s.lb.Spec.PublishesClusterEndpoint() ||
		workerRefusal(s.lb, s.members) != "" {
		return
	}
	lb := s.lb
	theirs := clusterEndpointOf(s.cluster)
	// Once the Cluster's endpoint was compared with ours (equal or not), it is no longer a
	// stranger's to adopt: a later difference means ours moved or somebody edited the Cluster.
	compared := false
	switch conditions.GetReason(lb, lbv1.ClusterEndpointCondition) {
	case lbv1.ClusterEndpointSetReason, lbv1.ClusterEndpointMismatchReason:
		compared = true
	}
	memberAddrs := map[string]bool{}
	for _, m := range s.members {
		for _, a := range m.facts.addresses {
			memberAddrs[a] = true
		}
	}
	adopt, refusal := decideAdoption(lb.Spec.Endpoint, lb.Status.Endpoint, theirs, compared,
		s.cluster.GetAnnotations()[lbv1.EndpointPublishedByAnnotation], lb.Name, memberAddrs)
	if refusal != "" {
		ctrl.LoggerFrom(ctx).V(1).Info("Not adopting the Cluster's endpoint", "reason", refusal)
	}
	if !adopt {
		return
	}
	lb.Spec.Endpoint = theirs
	r.event(lb, s.cluster, false, lbv1.EventEndpointAdopted, "Adopt",
		"Cluster %s already has controlPlaneEndpoint %s:%d and spec.endpoint.host was empty: adopted it into spec.endpoint",
		s.cluster.Name, theirs.Host, theirs.Port)
}

// reconcileEndpoint sets EndpointAvailable and publishes the endpoint to the Cluster and the
// control plane. Publication does not wait for the endpoint to answer probes: KCP creates its
// first Machine only once the Cluster has an endpoint, so an external load balancer with no
// healthy backend yet must still be published.
func (r *LoadBalancerReconciler) reconcileEndpoint(ctx context.Context, s *scope) error {
	if s.ensured {
		r.setEndpointAvailable(s)
	}
	if err := r.publishToCluster(ctx, s); err != nil {
		return err
	}
	return r.publishToControlPlane(ctx, s)
}

// setEndpointAvailable sets EndpointAvailable from the backend's answer, with an event when it
// changes.
func (r *LoadBalancerReconciler) setEndpointAvailable(s *scope) {
	lb := s.lb
	prevAvailable := conditions.Get(lb, lbv1.EndpointAvailableCondition)
	cond := metav1.Condition{Type: lbv1.EndpointAvailableCondition}
	switch {
	case s.ensureErr != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, lbv1.BackendErrorReason, s.ensureErr.Error()
	case s.endpoint.Available:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, orDefault(s.endpoint.Reason, lbv1.EndpointAvailableReason), s.endpoint.Message
	default:
		reason := s.endpoint.Reason
		if reason == "" || reason == lbv1.EndpointAvailableReason {
			reason = lbv1.WaitingForEndpointReason
		}
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reason, s.endpoint.Message
	}
	conditions.Set(lb, cond)
	if prevAvailable == nil || prevAvailable.Status != cond.Status {
		// The first availability of a LoadBalancer with a Cluster is told by ClusterEndpointSet;
		// one event fewer per LoadBalancer matters when a thousand are created at once.
		if cond.Status == metav1.ConditionTrue && (prevAvailable != nil || lb.Spec.ClusterName == "") {
			r.event(lb, nil, false, lbv1.EventEndpointAvailable, "Probe", "endpoint %s:%d is available: %s",
				lb.Status.Endpoint.Host, lb.Status.Endpoint.Port, cond.Message)
		} else if prevAvailable != nil {
			r.event(lb, nil, true, lbv1.EventEndpointUnavailable, "Probe", "endpoint not available (%s): %s", cond.Reason, cond.Message)
		}
	}
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func (r *LoadBalancerReconciler) publishToCluster(ctx context.Context, s *scope) error {
	lb := s.lb
	set := func(status metav1.ConditionStatus, reason, msg string) {
		conditions.Set(lb, metav1.Condition{Type: lbv1.ClusterEndpointCondition, Status: status, Reason: reason, Message: msg})
	}
	switch {
	case lb.Spec.ClusterName == "":
		set(metav1.ConditionTrue, lbv1.NoClusterReason, "standalone LoadBalancer (no spec.clusterName): nothing to publish to")
		return nil
	case s.clusterMissing:
		set(metav1.ConditionFalse, lbv1.ClusterNotFoundReason,
			fmt.Sprintf("Cluster %s/%s not found; the endpoint is published once it exists", lb.Namespace, lb.Spec.ClusterName))
		return nil
	case !s.cluster.DeletionTimestamp.IsZero():
		return nil
	case !lb.Spec.PublishesClusterEndpoint():
		set(metav1.ConditionTrue, lbv1.NotPublisherReason, fmt.Sprintf(
			"spec.publishClusterEndpoint is false: Cluster %s's endpoint is another's to publish; this LoadBalancer serves an additional endpoint (its host must be in the API servers' certSANs, see status.certSANs)",
			lb.Spec.ClusterName))
		return nil
	}
	if !s.gathered && !lb.Spec.TargetKind.IsNode() && !lb.Spec.SelectsControlPlaneOnly() {
		// The members decide whether this LoadBalancer may publish (workerRefusal): not without them.
		s.notPublisher = true
		return nil
	}
	if msg := workerRefusal(lb, s.members); msg != "" {
		s.notPublisher = true
		if conditions.GetReason(lb, lbv1.ClusterEndpointCondition) != lbv1.WorkerTargetsReason {
			r.event(lb, s.cluster, true, lbv1.EventWorkerTargets, "Publish", "%s", msg)
		}
		set(metav1.ConditionFalse, lbv1.WorkerTargetsReason, msg)
		return nil
	}
	// The admission webhook (PublisherValidator) refuses a second publisher up front; this is the
	// backstop for what passes it: two LoadBalancers created at once, or a webhook not installed.
	if other := decideOlderPublisher(lb, s.peers); other != "" {
		s.notPublisher = true
		msg := fmt.Sprintf("LoadBalancer %s also publishes Cluster %s's endpoint and is older: exactly one LoadBalancer of a Cluster may; "+
			"set spec.publishClusterEndpoint: false on this one (or on %s) to serve an additional endpoint", other, lb.Spec.ClusterName, other)
		if conditions.GetReason(lb, lbv1.ClusterEndpointCondition) != lbv1.AnotherPublisherReason {
			r.event(lb, s.cluster, true, lbv1.EventAnotherPublisher, "Publish", "%s", msg)
		}
		set(metav1.ConditionFalse, lbv1.AnotherPublisherReason, msg)
		return nil
	}
	cluster := s.cluster
	theirs, ours := clusterEndpointOf(cluster), lb.Status.Endpoint
	switch decideClusterEndpoint(theirs, ours) {
	case decideWait:
		set(metav1.ConditionFalse, lbv1.WaitingForEndpointReason,
			"the backend has no endpoint yet (static with spec.endpoint.host empty waits for a ready member; arp and bgp wait for the VIP's allocation)")
	case decideInSync:
		set(metav1.ConditionTrue, lbv1.ClusterEndpointSetReason,
			fmt.Sprintf("Cluster %s spec.controlPlaneEndpoint is %s:%d", cluster.Name, ours.Host, ours.Port))
	case decidePublish:
		original := cluster.DeepCopy()
		cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: ours.Host, Port: ours.Port}
		// Who wrote it, in the same patch: after a crash before our status is written, the next
		// reconcile must recognise its own choice rather than adopt it (decideAdoption).
		anns := cluster.GetAnnotations()
		if anns == nil {
			anns = map[string]string{}
		}
		anns[lbv1.EndpointPublishedByAnnotation] = lb.Name
		cluster.SetAnnotations(anns)
		// Optimistic lock: if somebody (CAPI copying from an InfraCluster) set an endpoint since
		// our cache saw the Cluster, the patch fails and the next reconcile sees theirs.
		if err := r.Client.Patch(ctx, cluster, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				// Expected now and then: the Cluster changed since our cache saw it. Look again
				// once the cache has the new version, without counting an error.
				ctrl.LoggerFrom(ctx).V(1).Info("Cluster changed while publishing the endpoint; retrying")
				s.requeueAfter(clusterConflictRetry)
				return nil
			}
			return fmt.Errorf("publishing the endpoint to Cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
		}
		r.Metrics.endpointPublished.WithLabelValues("Cluster").Inc()
		set(metav1.ConditionTrue, lbv1.ClusterEndpointSetReason,
			fmt.Sprintf("Cluster %s spec.controlPlaneEndpoint is %s:%d", cluster.Name, ours.Host, ours.Port))
		r.event(lb, cluster, false, lbv1.EventClusterEndpointSet, "Publish",
			"set Cluster %s spec.controlPlaneEndpoint to %s:%d", cluster.Name, ours.Host, ours.Port)
	case decideMismatch:
		if lb.Spec.MovesEndpointOnMemberLeave() && cluster.GetAnnotations()[lbv1.EndpointPublishedByAnnotation] == lb.Name {
			// The member the Cluster names left: the member move (reconcileEndpointMove) rewrites
			// the cluster's copies of the endpoint, then the Cluster.
			set(metav1.ConditionFalse, lbv1.SwitchingReason, fmt.Sprintf(
				"Cluster %s spec.controlPlaneEndpoint is %s:%d, the address of a member that left; moving it to %s:%d (condition EndpointMove)",
				cluster.Name, theirs.Host, theirs.Port, ours.Host, ours.Port))
			return nil
		}
		msg := fmt.Sprintf("Cluster %s spec.controlPlaneEndpoint is %s:%d but this LoadBalancer serves %s:%d; "+
			"caplb never overwrites a Cluster's endpoint (it is baked into certificates and kubeconfigs)",
			cluster.Name, theirs.Host, theirs.Port, ours.Host, ours.Port)
		if conditions.GetReason(lb, lbv1.ClusterEndpointCondition) != lbv1.ClusterEndpointMismatchReason {
			r.event(lb, cluster, true, lbv1.EventClusterEndpointMismatch, "Publish", "%s", msg)
		}
		set(metav1.ConditionFalse, lbv1.ClusterEndpointMismatchReason, msg)
	}
	return nil
}

// loadBalancerRefNames reports whether a control plane's spec.loadBalancerRef names lb. Both
// reference shapes are accepted: the contract-versioned {apiGroup, kind, name} of CAPI v1beta2
// and the ObjectReference {apiVersion, kind, name, namespace} of the proposal's era. Empty group,
// kind and namespace mean "ours".
func loadBalancerRefNames(ref map[string]any, lb *lbv1.LoadBalancer) bool {
	str := func(k string) string { v, _ := ref[k].(string); return v }
	if str("name") != lb.Name {
		return false
	}
	if k := str("kind"); k != "" && k != "LoadBalancer" {
		return false
	}
	if g := str("apiGroup"); g != "" && g != lbv1.GroupVersion.Group {
		return false
	}
	if av := str("apiVersion"); av != "" {
		gv, err := schema.ParseGroupVersion(av)
		if err != nil || gv.Group != lbv1.GroupVersion.Group {
			return false
		}
	}
	if ns := str("namespace"); ns != "" && ns != lb.Namespace {
		return false
	}
	return true
}

// controlPlaneRecheck is how soon a control plane that is missing, or that does not (yet) take our
// endpoint, is looked at again when no watch on its kind tells us it changed.
const controlPlaneRecheck = time.Minute

// publishToControlPlane writes our endpoint to the control plane's spec.controlPlaneEndpoint when
// its spec.loadBalancerRef names this LoadBalancer and it has no endpoint. Only an in-sync
// outcome is remembered as final; "not named", "has another endpoint" and "not found" are looked
// at again when the control plane changes (a metadata watch on its kind) or, without a watch,
// every controlPlaneRecheck.
func (r *LoadBalancerReconciler) publishToControlPlane(ctx context.Context, s *scope) error {
	lb := s.lb
	if s.cluster == nil || !s.cluster.Spec.ControlPlaneRef.IsDefined() || !lb.Status.Endpoint.IsValid() ||
		!lb.Spec.PublishesClusterEndpoint() || s.notPublisher {
		return nil
	}
	ref := s.cluster.Spec.ControlPlaneRef
	refKey := fmt.Sprintf("%s/%s/%s=%s:%d", ref.APIGroup, ref.Kind, ref.Name, lb.Status.Endpoint.Host, lb.Status.Endpoint.Port)
	var memo cpMemo
	if v, ok := r.cpPublished.Load(lb.UID); ok {
		memo = v.(cpMemo)
	}
	log := ctrl.LoggerFrom(ctx).WithValues(ref.Kind, klog.KRef(lb.Namespace, ref.Name))
	mapping, err := r.RESTMapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		if meta.IsNoMatchError(err) {
			log.V(1).Info("Control plane kind is not served; not publishing to it")
			s.requeueAfter(controlPlaneRecheck)
			return nil
		}
		return fmt.Errorf("resolving the version of %s.%s: %w", ref.Kind, ref.APIGroup, err)
	}
	key := client.ObjectKey{Namespace: lb.Namespace, Name: ref.Name}
	if r.cpWatches.ensure(ctx, mapping.GroupVersionKind) && r.cpWatches.synced(ctx, mapping.GroupVersionKind) {
		// The watch's cache holds the control plane's metadata: unchanged since we last looked
		// means nothing to do, whatever we found then.
		pm := &metav1.PartialObjectMetadata{}
		pm.SetGroupVersionKind(mapping.GroupVersionKind)
		switch err := r.Client.Get(ctx, key, pm); {
		case apierrors.IsNotFound(err):
			r.cpPublished.Delete(lb.UID)
			return nil // the watch reports its creation
		case err == nil && memo.ref == refKey && memo.resourceVersion == pm.GetResourceVersion():
			return nil
		}
	} else {
		// No (synced) watch: the manager may not list this kind, or its cache is still filling.
		if memo.ref == refKey && memo.inSync {
			return nil
		}
		s.requeueAfter(controlPlaneRecheck)
	}

	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.APIReader.Get(ctx, key, cp); err != nil {
		if apierrors.IsNotFound(err) {
			r.cpPublished.Delete(lb.UID)
			s.requeueAfter(controlPlaneRecheck)
			return nil
		}
		return fmt.Errorf("reading control plane %s %s/%s: %w", ref.Kind, lb.Namespace, ref.Name, err)
	}
	remember := func(rv string, inSync bool) {
		r.cpPublished.Store(lb.UID, cpMemo{ref: refKey, resourceVersion: rv, inSync: inSync})
	}
	lbRef, found, err := unstructured.NestedMap(cp.Object, "spec", "loadBalancerRef")
	if err != nil || !found || !loadBalancerRefNames(lbRef, lb) {
		remember(cp.GetResourceVersion(), false)
		return nil
	}
	host, _, _ := unstructured.NestedString(cp.Object, "spec", "controlPlaneEndpoint", "host")
	port, _, _ := unstructured.NestedInt64(cp.Object, "spec", "controlPlaneEndpoint", "port")
	if host != "" || port != 0 {
		inSync := host == lb.Status.Endpoint.Host && port == int64(lb.Status.Endpoint.Port)
		if !inSync && !memo.inSync && memo.resourceVersion != cp.GetResourceVersion() {
			log.Info("Control plane already has another endpoint; leaving it", "host", host, "port", port)
		}
		remember(cp.GetResourceVersion(), inSync)
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": cp.GetResourceVersion()},
		"spec": map[string]any{"controlPlaneEndpoint": map[string]any{
			"host": lb.Status.Endpoint.Host, "port": lb.Status.Endpoint.Port,
		}},
	})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, cp, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsConflict(err) {
			// The control plane changed since we read it: look again, as the Cluster path does.
			log.V(1).Info("Control plane changed while publishing the endpoint; retrying")
			s.requeueAfter(clusterConflictRetry)
			return nil
		}
		return fmt.Errorf("publishing the endpoint to control plane %s %s/%s: %w", ref.Kind, lb.Namespace, ref.Name, err)
	}
	remember(cp.GetResourceVersion(), true)
	r.Metrics.endpointPublished.WithLabelValues("ControlPlane").Inc()
	r.event(lb, cp, false, lbv1.EventControlPlaneEndpointSet, "Publish", "set %s %s spec.controlPlaneEndpoint to %s:%d",
		ref.Kind, ref.Name, lb.Status.Endpoint.Host, lb.Status.Endpoint.Port)
	return nil
}
