package controllers

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers"
)

// The class creates and deletes the LoadBalancers it stamps out; Clusters are only read (the
// LoadBalancer reconciler's markers already grant get/list/watch/patch on them).
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancerclasses,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancerclasses/status,verbs=get;patch
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancerclasses/finalizers,verbs=update
// +kubebuilder:rbac:groups=loadbalancer.cluster.x-k8s.io,resources=loadbalancers,verbs=get;list;watch;create;patch;delete

// ClassControllerName is the default name of the LoadBalancerClass controller (Options.ControllerName,
// when set, names it <ControllerName>-class).
const ClassControllerName = "loadbalancerclass"

// LoadBalancerClassReconciler gives every Cluster a LoadBalancerClass selects a LoadBalancer
// made from the class's template, keeps it in sync where the LoadBalancer's immutability rules
// allow, and deletes it when the Cluster stops matching or the class is deleted.
type LoadBalancerClassReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// Backends validates the template as the LoadBalancer reconciler would validate the result.
	Backends *providers.Registry
	// Recorder, when set, emits events regarding classes.
	Recorder events.EventRecorder
	// Clusters: the cluster serves CAPI's Clusters. Without them a class is only reported
	// (APINotInstalled) and no Cluster is watched (optional_apis.go).
	Clusters bool
}

// event records a Normal event on the class about one of its LoadBalancers.
func (r *LoadBalancerClassReconciler) event(class *lbv1.LoadBalancerClass, lb *lbv1.LoadBalancer, reason, action, note string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(class, lb, corev1.EventTypeNormal, reason, action, "%s", note)
	}
}

// classScope is what one reconcile of a class learned, for its Ready condition.
type classScope struct {
	class *lbv1.LoadBalancerClass
	// invalid: the selector or template is invalid; the message says why.
	invalid string
	// missingAPI: the class needs an API the cluster does not serve; the message says which.
	missingAPI string
	// conflicts, notApplied, notReady name LoadBalancers (and why, for notApplied).
	conflicts, notApplied, notReady []string
	// paused names the matching Clusters left alone because they are paused.
	paused         []string
	matched, ready int32
	err            error
}

// LoadBalancerName is the name of the LoadBalancer a class gives a Cluster: <cluster>-<class>,
// so that two classes may select one Cluster (say a static and a bgp endpoint) without clashing.
func LoadBalancerName(clusterName, className string) string {
	return clusterName + "-" + className
}

// Reconcile follows the LoadBalancer reconciler's order: get, finalizer, patch helper, paused,
// deferred status patch, then the delete or the normal path.
func (r *LoadBalancerClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	class := &lbv1.LoadBalancerClass{}
	if err := r.Client.Get(ctx, req.NamespacedName, class); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if added, err := finalizers.EnsureFinalizer(ctx, r.Client, class, lbv1.LoadBalancerClassFinalizer); err != nil || added {
		return ctrl.Result{}, err
	}
	helper, err := patch.NewHelper(class, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	paused := annotations.HasPaused(class)
	pausedCond := metav1.Condition{Type: lbv1.PausedCondition, Status: metav1.ConditionFalse, Reason: lbv1.NotPausedReason}
	if paused {
		pausedCond = metav1.Condition{Type: lbv1.PausedCondition, Status: metav1.ConditionTrue, Reason: lbv1.PausedReason,
			Message: "LoadBalancerClass has the " + clusterv1.PausedAnnotation + " annotation"}
	}
	conditions.Set(class, pausedCond)

	s := &classScope{class: class}
	defer func() {
		if !paused {
			s.err = reterr
			setClassReady(s)
			if reterr == nil {
				class.Status.ObservedGeneration = class.Generation
			}
		}
		if err := helper.Patch(ctx, class, patch.WithOwnedConditions{Conditions: []string{lbv1.ReadyCondition, lbv1.PausedCondition}}); err != nil {
			if !(apierrors.IsNotFound(err) && !class.DeletionTimestamp.IsZero()) {
				reterr = kerrors.NewAggregate([]error{reterr, fmt.Errorf("patching LoadBalancerClass: %w", err)})
			}
		}
	}()
	if paused {
		return ctrl.Result{}, nil
	}
	if !class.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileClassDelete(ctx, class)
	}
	return ctrl.Result{}, r.reconcileClassNormal(ctx, s)
}

// ownedLoadBalancers lists the LoadBalancers the class created, by name.
func (r *LoadBalancerClassReconciler) ownedLoadBalancers(ctx context.Context, class *lbv1.LoadBalancerClass) (map[string]*lbv1.LoadBalancer, error) {
	list := &lbv1.LoadBalancerList{}
	if err := r.Client.List(ctx, list, client.InNamespace(class.Namespace), client.MatchingLabels{lbv1.ClassLabel: class.Name}); err != nil {
		return nil, fmt.Errorf("listing the class's LoadBalancers: %w", err)
	}
	out := make(map[string]*lbv1.LoadBalancer, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// reconcileClassDelete deletes the class's LoadBalancers (each one's own finalizer releases its
// members' hooks first) and drops the class's finalizer once none is left.
func (r *LoadBalancerClassReconciler) reconcileClassDelete(ctx context.Context, class *lbv1.LoadBalancerClass) error {
	owned, err := r.ownedLoadBalancers(ctx, class)
	if err != nil {
		return err
	}
	var errs []error
	for _, lb := range owned {
		if lb.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, lb); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("deleting LoadBalancer %s: %w", lb.Name, err))
			} else {
				r.event(class, lb, lbv1.EventClassLoadBalancerDeleted, "Delete", "deleted LoadBalancer "+lb.Name+": the class is being deleted")
			}
		}
	}
	if len(errs) > 0 || len(owned) > 0 {
		// The LoadBalancers' deletion events bring the class back.
		return kerrors.NewAggregate(errs)
	}
	controllerutil.RemoveFinalizer(class, lbv1.LoadBalancerClassFinalizer)
	return nil
}

// reconcileClassNormal creates, updates and deletes the class's LoadBalancers.
func (r *LoadBalancerClassReconciler) reconcileClassNormal(ctx context.Context, s *classScope) error {
	class := s.class
	log := ctrl.LoggerFrom(ctx)
	sel, err := metav1.LabelSelectorAsSelector(&class.Spec.ClusterSelector)
	if err != nil {
		s.invalid = fmt.Sprintf("spec.clusterSelector: %v", err)
		return nil
	}
	if msg := validateTemplate(class, r.Backends); msg != "" {
		s.invalid = msg
		return nil
	}
	if !r.Clusters {
		s.missingAPI = fmt.Sprintf("a LoadBalancerClass selects Clusters and needs the CRD %s, which this cluster does not serve: "+
			"install Cluster API (clusterctl init) and restart the manager, or create LoadBalancers directly",
			crdName(clusterv1.GroupVersion, resourceClusters))
		return nil
	}
	clusters := &clusterv1.ClusterList{}
	if err := r.Client.List(ctx, clusters, client.InNamespace(class.Namespace)); err != nil {
		return fmt.Errorf("listing Clusters: %w", err)
	}
	owned, err := r.ownedLoadBalancers(ctx, class)
	if err != nil {
		return err
	}

	var errs []error
	keep := map[string]bool{}
	paused := map[string]bool{}
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if clusterPaused(c) {
			// A paused Cluster (clusterctl move pauses every Cluster it moves) keeps its
			// LoadBalancer as it is: created, updated or deleted only once it resumes, so that a
			// class on both sides of a move never makes a second one.
			paused[c.Name] = true
		}
		if !sel.Matches(labels.Set(c.Labels)) {
			continue
		}
		name := LoadBalancerName(c.Name, class.Name)
		if paused[c.Name] {
			s.matched++
			keep[name] = true
			s.paused = append(s.paused, c.Name)
			continue
		}
		if !c.DeletionTimestamp.IsZero() {
			// The Cluster's deletion takes its LoadBalancer along (ownerRef); leave it be.
			keep[name] = true
			continue
		}
		s.matched++
		keep[name] = true
		want := class.Spec.Template.Spec.LoadBalancerSpecFor(c.Name)
		lb, ok := owned[name]
		if !ok {
			if err := r.createLoadBalancer(ctx, s, c, name, want); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := r.syncLoadBalancer(ctx, s, lb, want); err != nil {
			errs = append(errs, err)
		}
		if conditions.IsTrue(lb, lbv1.ReadyCondition) {
			s.ready++
		} else {
			s.notReady = append(s.notReady, name)
		}
	}
	for name, lb := range owned {
		if keep[name] || !lb.DeletionTimestamp.IsZero() || paused[lb.Spec.ClusterName] {
			continue
		}
		log.Info("Deleting LoadBalancer: its Cluster no longer matches the class", "LoadBalancer", name, "Cluster", lb.Spec.ClusterName)
		if err := r.Client.Delete(ctx, lb); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting LoadBalancer %s: %w", name, err))
		} else {
			r.event(class, lb, lbv1.EventClassLoadBalancerDeleted, "Delete",
				fmt.Sprintf("deleted LoadBalancer %s: Cluster %s no longer matches", name, lb.Spec.ClusterName))
		}
	}
	return kerrors.NewAggregate(errs)
}

// createLoadBalancer creates the Cluster's LoadBalancer, controlled by the Cluster (so that it
// goes with the Cluster and `clusterctl move` takes it along) and labelled with the class. An
// existing LoadBalancer of that name that the class did not create is reported, never touched.
func (r *LoadBalancerClassReconciler) createLoadBalancer(ctx context.Context, s *classScope, c *clusterv1.Cluster, name string, spec lbv1.LoadBalancerSpec) error {
	existing := &lbv1.LoadBalancer{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, existing)
	switch {
	case err == nil:
		s.conflicts = append(s.conflicts, name)
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading LoadBalancer %s: %w", name, err)
	}
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespace,
			Name:      name,
			Labels:    classLBLabels(s.class, c.Name),
			// No blockOwnerDeletion: it would need update on clusters/finalizers, and the
			// LoadBalancer's own finalizer already orders its release before it is gone.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: c.Name, UID: c.UID, Controller: ptr.To(true),
			}},
		},
		Spec: spec,
	}
	if err := r.Client.Create(ctx, lb); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			// Admission refused what the template makes: say so, do not retry hot.
			s.notApplied = append(s.notApplied, fmt.Sprintf("%s: not created: %v", name, err))
			return nil
		}
		if apierrors.IsAlreadyExists(err) {
			s.conflicts = append(s.conflicts, name)
			return nil
		}
		return fmt.Errorf("creating LoadBalancer %s: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created LoadBalancer for Cluster", "LoadBalancer", name, "Cluster", c.Name)
	r.event(s.class, lb, lbv1.EventClassLoadBalancerCreated, "Create", fmt.Sprintf("created LoadBalancer %s for Cluster %s", name, c.Name))
	s.notReady = append(s.notReady, name)
	return nil
}

// syncLoadBalancer brings an existing LoadBalancer's spec to the template where its
// immutability rules allow; what they forbid is reported, not forced.
func (r *LoadBalancerClassReconciler) syncLoadBalancer(ctx context.Context, s *classScope, lb *lbv1.LoadBalancer, want lbv1.LoadBalancerSpec) error {
	before := lb.DeepCopy()
	notApplied := mergeTemplate(&lb.Spec, want)
	for _, n := range notApplied {
		s.notApplied = append(s.notApplied, lb.Name+": "+n)
	}
	if reflect.DeepEqual(before.Spec, lb.Spec) {
		return nil
	}
	if err := r.Client.Patch(ctx, lb, client.MergeFrom(before)); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			s.notApplied = append(s.notApplied, fmt.Sprintf("%s: template refused: %v", lb.Name, err))
			return nil
		}
		return fmt.Errorf("updating LoadBalancer %s: %w", lb.Name, err)
	}
	return nil
}

// mergeTemplate applies want to spec except where a LoadBalancer cannot change: the backend
// kind, a VIP backend's addressFrom, and an endpoint host or port once set (an endpoint the
// LoadBalancer adopted from its Cluster is not a difference). It returns what it left out.
func mergeTemplate(spec *lbv1.LoadBalancerSpec, want lbv1.LoadBalancerSpec) []string {
	var out []string
	spec.Selector = want.Selector
	spec.PublishClusterEndpoint = want.PublishClusterEndpoint
	spec.TargetPort = want.TargetPort
	spec.HealthCheck = want.HealthCheck
	spec.Quiesce = want.Quiesce

	if have, w := spec.Backend.Kind(), want.Backend.Kind(); have != w {
		out = append(out, fmt.Sprintf("spec.backend is %s, the template says %s (the kind cannot change)", have, w))
	} else {
		b := *want.Backend.DeepCopy()
		if hv, wv := spec.Backend.VIP(), b.VIP(); hv != nil && wv != nil && !reflect.DeepEqual(hv.AddressFrom, wv.AddressFrom) {
			out = append(out, fmt.Sprintf("spec.backend.%s.addressFrom differs from the template (it cannot change once set)", have))
			wv.AddressFrom = hv.AddressFrom
		}
		spec.Backend = b
	}

	switch h, w := spec.Endpoint.Host, want.Endpoint.Host; {
	case h == "":
		spec.Endpoint.Host = w
	case w != "" && w != h:
		out = append(out, fmt.Sprintf("spec.endpoint.host is %s, the template says %s (it cannot change once set)", h, w))
	}
	switch p, w := spec.Endpoint.Port, want.Endpoint.Port; {
	case p == 0:
		spec.Endpoint.Port = w
	case w != 0 && w != p:
		out = append(out, fmt.Sprintf("spec.endpoint.port is %d, the template says %d (it cannot change once set)", p, w))
	}
	return out
}

// validateTemplate checks the template as the LoadBalancer reconciler would check the
// LoadBalancers it makes, with field paths under spec.template.spec.
func validateTemplate(class *lbv1.LoadBalancerClass, reg *providers.Registry) string {
	t := &class.Spec.Template.Spec
	v := t.Backend.VIP()
	switch {
	case v != nil && v.AddressFrom == nil:
		return fmt.Sprintf("spec.template.spec.backend.%s.addressFrom.poolRef is required: one template serves many Clusters, so each Cluster's VIP comes from an IPAM pool", t.Backend.Kind())
	case v != nil && t.Endpoint.Host != "":
		return "spec.template.spec.endpoint.host must be empty for the arp and bgp backends: the VIP comes from addressFrom.poolRef"
	case t.Backend.WireGuard != nil:
		return "spec.template.spec.backend.wireguard is not supported in a LoadBalancerClass: each Cluster needs its own ports " +
			"on shared gateways (spec.endpoint.port, gateways[].port) or its own gateways; create one LoadBalancer per Cluster"
	}
	lb := &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: class.Namespace, Name: "template"}, Spec: t.LoadBalancerSpecFor("template")}
	errs := Validate(lb, reg)
	if len(errs) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		e.Field = strings.Replace(e.Field, "spec.", "spec.template.spec.", 1)
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}

// setClassReady writes the Ready condition from what the reconcile learned, the most pressing
// problem first.
func setClassReady(s *classScope) {
	st := &s.class.Status
	st.MatchedClusters, st.ReadyLoadBalancers = s.matched, s.ready
	c := metav1.Condition{Type: lbv1.ReadyCondition, Status: metav1.ConditionFalse}
	switch {
	case s.invalid != "":
		c.Reason, c.Message = lbv1.InvalidSpecReason, s.invalid
	case s.missingAPI != "":
		c.Reason, c.Message = lbv1.APINotInstalledReason, s.missingAPI
	case s.err != nil:
		c.Reason, c.Message = lbv1.ReconcileErrorReason, s.err.Error()
	case !s.class.DeletionTimestamp.IsZero():
		c.Reason, c.Message = lbv1.DeletingReason, "deleting the class's LoadBalancers"
	case len(s.conflicts) > 0:
		c.Reason = lbv1.LoadBalancerNameConflictReason
		c.Message = "LoadBalancers of these names exist and were not created by this class; rename or delete them: " + strings.Join(s.conflicts, ", ")
	case len(s.notApplied) > 0:
		c.Reason, c.Message = lbv1.TemplateNotAppliedReason, strings.Join(s.notApplied, "; ")
	case s.matched == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, lbv1.NoClustersMatchedReason, "spec.clusterSelector matches no Cluster in the namespace"
	case len(s.notReady) > 0 || len(s.paused) > 0:
		var parts []string
		if len(s.notReady) > 0 {
			parts = append(parts, "not Ready yet: "+strings.Join(s.notReady, ", "))
		}
		if len(s.paused) > 0 {
			parts = append(parts, "Clusters paused, their LoadBalancers left as they are: "+strings.Join(s.paused, ", "))
		}
		c.Reason, c.Message = lbv1.WaitingForLoadBalancersReason, strings.Join(parts, "; ")
	default:
		c.Status, c.Reason = metav1.ConditionTrue, lbv1.ReadyReason
	}
	conditions.Set(s.class, c)
}

// classLBLabels are the labels of a LoadBalancer the class creates: the class, the Cluster, and
// the class's shard (cluster.x-k8s.io/watch-filter), so that the manager that reconciles the
// class also reconciles what it creates.
func classLBLabels(class *lbv1.LoadBalancerClass, cluster string) map[string]string {
	l := map[string]string{lbv1.ClassLabel: class.Name, clusterv1.ClusterNameLabel: cluster}
	if v, ok := class.Labels[clusterv1.WatchLabel]; ok {
		l[clusterv1.WatchLabel] = v
	}
	return l
}
