package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// nodeControlPlaneLabel marks control-plane Nodes (kubeadm, k3s, RKE2 all set it).
const nodeControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// addressPreference is the order in which the controller picks Member.Address (backends may
// prefer another type through Member.Addresses).
var addressPreference = []string{"InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS", "Hostname"}

// facts is what the controller reads from one member object, the same for Machines and Nodes.
type facts struct {
	name     string
	ready    bool
	deleting bool
	disabled bool
	labels   labels.Set
	owner    string // value of the name annotation
	status   string // value of the status annotation
	ourHook  bool
	// ourPreTermHook: the object carries this LoadBalancer's pre-terminate hook.
	ourPreTermHook bool
	// clusterDeleting: the member's Cluster is being deleted (no pre-terminate hook is held).
	clusterDeleting bool
	addresses       map[string]string // first address of each type
	address         string            // by addressPreference
	// cluster is the Machine's spec.clusterName ("" for Nodes).
	cluster string
	// nodeName is the Machine's status.nodeRef name, or the Node's own name.
	nodeName string
}

// memberKind hides the difference between Machine and Node members.
type memberKind interface {
	// candidates lists the objects the selector is evaluated on.
	candidates(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error)
	// annotated lists the objects carrying this LoadBalancer's name annotation or hook.
	annotated(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error)
	// get reads one member; NotFound errors pass through.
	get(ctx context.Context, lb *lbv1.LoadBalancer, name string) (client.Object, error)
	// facts extracts the facts of an object this kind returned.
	facts(lb *lbv1.LoadBalancer, obj client.Object) facts
	// hooks reports whether members carry deletion hooks (Machines do, Nodes do not).
	hooks() bool
	// kind is "Machine" or "Node", for messages.
	kind() string
	// patch writes a change of a member's annotations to the cluster the member lives in (the
	// management cluster, or a workload cluster for remote Nodes).
	patch(ctx context.Context, obj client.Object, p client.Patch) error
}

// kindFor returns the memberKind of Machine and local Node targets; c reads from the manager's
// cache and writes to its API server. Remote Node targets are built by remoteKindFor.
func kindFor(lb *lbv1.LoadBalancer, c client.Client) memberKind {
	if lb.Spec.TargetKind.IsNode() {
		return nodeKind{c: c, w: c}
	}
	return machineKind{c: c, w: c}
}

// ownerValue is the value of the name annotation this LoadBalancer writes. Machines share the
// LoadBalancer's namespace, so its name suffices (the proposal's form); Nodes are cluster-scoped,
// so two LoadBalancers in different namespaces must not collide.
func ownerValue(lb *lbv1.LoadBalancer) string {
	if lb.Spec.TargetKind.IsNode() {
		return lb.Namespace + "/" + lb.Name
	}
	return lb.Name
}

// hookSuffix is the part of our hook key after the CAPI prefix and "/", used by the index.
func hookSuffix(lbName string) string {
	key := lbv1.PreDrainHookAnnotation(lbName)
	return key[strings.Index(key, "/")+1:]
}

// memberSelector returns the label selector that picks members: spec.selector, or the default
// for the target kind.
func memberSelector(lb *lbv1.LoadBalancer) (labels.Selector, error) {
	if lb.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(lb.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("spec.selector: %w", err)
		}
		return sel, nil
	}
	if lb.Spec.TargetKind.IsNode() {
		req, err := labels.NewRequirement(nodeControlPlaneLabel, selection.Exists, nil)
		if err != nil {
			return nil, err
		}
		return labels.NewSelector().Add(*req), nil
	}
	byCluster, err := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Equals, []string{lb.Spec.ClusterName})
	if err != nil {
		return nil, fmt.Errorf("default selector for spec.clusterName %q: %w", lb.Spec.ClusterName, err)
	}
	cp, err := labels.NewRequirement(clusterv1.MachineControlPlaneLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*byCluster, *cp), nil
}

// selection is the pure selection rule: matches the selector, belongs to the LoadBalancer's
// Cluster (Machines), and is not claimed by another LoadBalancer (a LoadBalancer that does not
// publish the Cluster's endpoint does not claim: it shares). claimedBy is set when only the last
// condition failed.
func selectionOf(lb *lbv1.LoadBalancer, sel labels.Selector, f facts) (selected bool, claimedBy string) {
	if !lb.Spec.TargetKind.IsNode() && f.cluster != lb.Spec.ClusterName {
		return false, ""
	}
	if !sel.Matches(f.labels) {
		return false, ""
	}
	// A LoadBalancer that does not publish the Cluster's endpoint (an additional endpoint of
	// the same control plane) shares members with the publisher, which owns their name
	// annotation.
	if f.owner != "" && f.owner != ownerValue(lb) && lb.Spec.PublishesClusterEndpoint() {
		return false, f.owner
	}
	return true, ""
}

func pickAddress(byType map[string]string) string {
	for _, t := range addressPreference {
		if a := byType[t]; a != "" {
			return a
		}
	}
	return ""
}

func commonFacts(lb *lbv1.LoadBalancer, obj client.Object) facts {
	ann := obj.GetAnnotations()
	_, disabled := ann[lbv1.DisabledAnnotation]
	f := facts{
		name:     obj.GetName(),
		deleting: !obj.GetDeletionTimestamp().IsZero(),
		disabled: disabled,
		labels:   labels.Set(obj.GetLabels()),
		owner:    ann[lbv1.NameAnnotation],
		status:   ann[lbv1.StatusAnnotation],
	}
	_, f.ourHook = ann[lbv1.PreDrainHookAnnotation(lb.Name)]
	_, f.ourPreTermHook = ann[lbv1.PreTerminateHookAnnotation(lb.Name)]
	return f
}

// machineKind: CAPI Machines of spec.clusterName in the LoadBalancer's namespace.
type machineKind struct {
	c client.Reader
	w client.Writer
}

func (k machineKind) kind() string { return lbv1.MachineKind }
func (k machineKind) hooks() bool  { return true }
func (k machineKind) patch(ctx context.Context, obj client.Object, p client.Patch) error {
	return k.w.Patch(ctx, obj, p)
}

func (k machineKind) candidates(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error) {
	var list clusterv1.MachineList
	if err := k.c.List(ctx, &list, client.InNamespace(lb.Namespace),
		client.MatchingFields{indexMachineClusterName: lb.Spec.ClusterName}); err != nil {
		return nil, fmt.Errorf("listing Machines of Cluster %s/%s: %w", lb.Namespace, lb.Spec.ClusterName, err)
	}
	return objectPtrs[clusterv1.Machine](list.Items), nil
}

func (k machineKind) annotated(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error) {
	seen := map[string]bool{}
	var out []client.Object
	for _, key := range []string{memberIndexName(ownerValue(lb)), memberIndexHook(lb.Name)} {
		var list clusterv1.MachineList
		if err := k.c.List(ctx, &list, client.InNamespace(lb.Namespace), client.MatchingFields{indexMemberOf: key}); err != nil {
			return nil, fmt.Errorf("listing Machines annotated by LoadBalancer %s/%s: %w", lb.Namespace, lb.Name, err)
		}
		for _, o := range objectPtrs[clusterv1.Machine](list.Items) {
			if !seen[o.GetName()] {
				seen[o.GetName()] = true
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func (k machineKind) get(ctx context.Context, lb *lbv1.LoadBalancer, name string) (client.Object, error) {
	m := &clusterv1.Machine{}
	return m, k.c.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: name}, m)
}

func (k machineKind) facts(lb *lbv1.LoadBalancer, obj client.Object) facts {
	m := obj.(*clusterv1.Machine)
	f := commonFacts(lb, obj)
	f.cluster = m.Spec.ClusterName
	f.nodeName = m.Status.NodeRef.Name
	f.ready = conditions.IsTrue(m, clusterv1.ReadyCondition)
	f.addresses = addressesByType(m.Status.Addresses, func(a clusterv1.MachineAddress) (string, string) { return string(a.Type), a.Address })
	f.address = pickAddress(f.addresses)
	return f
}

// nodeKind: Nodes, cluster-scoped: of the cluster the manager runs in (c is the manager's
// client), or of a workload cluster (remoteNodeKind wraps it with the ClusterCache's client).
type nodeKind struct {
	c client.Reader
	w client.Writer
}

func (k nodeKind) kind() string { return lbv1.NodeKind }
func (k nodeKind) hooks() bool  { return false }
func (k nodeKind) patch(ctx context.Context, obj client.Object, p client.Patch) error {
	return k.w.Patch(ctx, obj, p)
}

func (k nodeKind) candidates(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error) {
	sel, err := memberSelector(lb)
	if err != nil {
		return nil, err
	}
	var list corev1.NodeList
	if err := k.c.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	return objectPtrs[corev1.Node](list.Items), nil
}

func (k nodeKind) annotated(ctx context.Context, lb *lbv1.LoadBalancer) ([]client.Object, error) {
	var list corev1.NodeList
	if err := k.c.List(ctx, &list, client.MatchingFields{indexMemberOf: memberIndexName(ownerValue(lb))}); err != nil {
		return nil, fmt.Errorf("listing Nodes annotated by LoadBalancer %s/%s: %w", lb.Namespace, lb.Name, err)
	}
	return objectPtrs[corev1.Node](list.Items), nil
}

func (k nodeKind) get(ctx context.Context, _ *lbv1.LoadBalancer, name string) (client.Object, error) {
	n := &corev1.Node{}
	return n, k.c.Get(ctx, client.ObjectKey{Name: name}, n)
}

func (k nodeKind) facts(lb *lbv1.LoadBalancer, obj client.Object) facts {
	n := obj.(*corev1.Node)
	f := commonFacts(lb, obj)
	f.nodeName = n.Name
	// Opt-in: a cordon (kubectl drain's first step, and the first step of most tools that remove
	// a node) takes the Node out like the disabled annotation.
	f.disabled = f.disabled || (lb.Spec.Quiesce.WhenCordoned && n.Spec.Unschedulable)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			f.ready = c.Status == corev1.ConditionTrue
		}
	}
	f.addresses = addressesByType(n.Status.Addresses, func(a corev1.NodeAddress) (string, string) { return string(a.Type), a.Address })
	f.address = pickAddress(f.addresses)
	return f
}

// objectPtrs returns pointers to the items of a typed list, as client.Objects.
func objectPtrs[T any, P interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, 0, len(items))
	for i := range items {
		out = append(out, P(&items[i]))
	}
	return out
}

// addressesByType maps address type to the first non-empty address of that type.
func addressesByType[A any](addrs []A, typeAndAddress func(A) (string, string)) map[string]string {
	out := map[string]string{}
	for _, a := range addrs {
		typ, addr := typeAndAddress(a)
		if _, dup := out[typ]; !dup && addr != "" {
			out[typ] = addr
		}
	}
	return out
}

// member is one object the reconcile looks at: a member, a former member, or a candidate.
type member struct {
	name      string
	obj       client.Object // nil when gone
	facts     facts
	obs       observation
	claimedBy string
	prev, cur record
	intent    intent
	result    backendResult
	outcome   outcome
}

// gatherMembers collects candidates, objects we annotated, and objects status.targets still
// remembers, and derives each one's observation and previous record.
func gatherMembers(ctx context.Context, lb *lbv1.LoadBalancer, k memberKind, now time.Time) ([]*member, error) {
	sel, err := memberSelector(lb)
	if err != nil {
		return nil, err
	}
	byName := map[string]*member{}
	add := func(obj client.Object) *member {
		if m, ok := byName[obj.GetName()]; ok {
			return m
		}
		f := k.facts(lb, obj)
		m := &member{name: f.name, obj: obj, facts: f}
		m.obs = observation{Exists: true, Deleting: f.deleting, Disabled: f.disabled}
		m.obs.Selected, m.claimedBy = selectionOf(lb, sel, f)
		byName[m.name] = m
		return m
	}

	cands, err := k.candidates(ctx, lb)
	if err != nil {
		return nil, err
	}
	for _, o := range cands {
		add(o)
	}
	annotated, err := k.annotated(ctx, lb)
	if err != nil {
		return nil, err
	}
	for _, o := range annotated {
		add(o)
	}
	for _, t := range lb.Status.Targets {
		if _, ok := byName[t.Name]; ok {
			continue
		}
		obj, err := k.get(ctx, lb, t.Name)
		switch {
		case apierrors.IsNotFound(err):
			byName[t.Name] = &member{name: t.Name}
		case err != nil:
			return nil, fmt.Errorf("reading %s %s: %w", k.kind(), t.Name, err)
		default:
			add(obj)
		}
	}

	prev := map[string]record{}
	for _, t := range lb.Status.Targets {
		prev[t.Name] = record{State: t.State, Since: t.Since.Time}
	}
	out := make([]*member, 0, len(byName))
	for _, m := range byName {
		if r, ok := prev[m.name]; ok && parseState(string(r.State)) != "" {
			if r.Since.IsZero() {
				r.Since = now
			}
			m.prev = r
		} else if m.obj != nil && m.facts.owner == ownerValue(lb) {
			// status.targets lost it (a status patch that failed after the member patch): the
			// member's own annotation still says where it was.
			// Its Since is unknown: count from now, so timeouts restart rather than fire at once.
			m.prev = record{State: parseState(m.facts.status), Since: now}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}
