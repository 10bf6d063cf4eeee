package testinfra

import (
	"context"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// NodeRegisteredAnnotation marks a TestMachine whose Node the test kubelet has registered.
// A kubelet registers once: a Node that CAPI later deletes (the last step of a Machine's
// deletion) must not come back.
const NodeRegisteredAnnotation = Group + "/node-registered"

// Reconciler provisions TestMachines and registers their Nodes.
type Reconciler struct {
	// Client reads and writes TestMachines in the management cluster.
	Client client.Client
	// APIReader reads TestMachines live, so a Machine deleted a moment ago is not seen through
	// a stale cache and given a Node again.
	APIReader client.Reader
	// Workload writes Nodes in the workload cluster. The tests use the management cluster's
	// API server for both, as CAPI's own envtest suites do.
	Workload client.Client
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	tm := &unstructured.Unstructured{}
	tm.SetGroupVersionKind(MachineGVK)
	return ctrl.NewControllerManagedBy(mgr).
		Named("testmachine").
		For(tm).
		WithOptions(opts).
		Complete(r)
}

// Reconcile plays provider and kubelet for one TestMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tm := &unstructured.Unstructured{}
	tm.SetGroupVersionKind(MachineGVK)
	if err := r.APIReader.Get(ctx, req.NamespacedName, tm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tm.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}

	if id, _, _ := unstructured.NestedString(tm.Object, "spec", "providerID"); id == "" {
		patch := fmt.Sprintf(`{"spec":{"providerID":%q}}`, ProviderID(tm.GetNamespace(), tm.GetName()))
		if err := r.Client.Patch(ctx, tm, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting providerID of TestMachine %s: %w", req, err)
		}
	}
	providerID, _, _ := unstructured.NestedString(tm.Object, "spec", "providerID")

	addrs, err := Addresses(tm)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("TestMachine %s: %w", req, err)
	}
	wantStatus := map[string]any{
		"initialization": map[string]any{"provisioned": true},
		"addresses":      addressesToList(addrs),
	}
	if cur, _, _ := unstructured.NestedMap(tm.Object, "status"); !reflect.DeepEqual(cur, wantStatus) {
		base := tm.DeepCopy()
		tm.Object["status"] = wantStatus
		if err := r.Client.Status().Patch(ctx, tm, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("marking TestMachine %s provisioned: %w", req, err)
		}
	}

	if noNode, _, _ := unstructured.NestedBool(tm.Object, "spec", "noNode"); noNode ||
		tm.GetAnnotations()[NodeRegisteredAnnotation] != "" {
		return ctrl.Result{}, nil
	}
	if err := r.registerNode(ctx, tm, providerID); err != nil {
		return ctrl.Result{}, err
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, NodeRegisteredAnnotation)
	if err := r.Client.Patch(ctx, tm, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return ctrl.Result{}, fmt.Errorf("marking TestMachine %s node-registered: %w", req, err)
	}
	return ctrl.Result{}, nil
}

// registerNode creates the Node (if missing) and reports it Ready, like a kubelet's first start.
func (r *Reconciler) registerNode(ctx context.Context, tm *unstructured.Unstructured, providerID string) error {
	addrs, err := Addresses(tm)
	if err != nil {
		return err
	}
	labels := map[string]string{corev1.LabelHostname: NodeName(tm)}
	extra, _, _ := unstructured.NestedStringMap(tm.Object, "spec", "nodeLabels")
	for k, v := range extra {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName(tm), Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: providerID},
	}
	if err := r.Workload.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("registering Node %s: %w", node.Name, err)
		}
		if err := r.Workload.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return fmt.Errorf("reading Node %s: %w", node.Name, err)
		}
	}
	return SetNodeReady(ctx, r.Workload, node, true, nodeAddresses(addrs))
}

// SetNodeReady writes the Node's Ready condition (and, when addrs is not nil, its addresses),
// as the kubelet's status updates would. A healthy kubelet also reports no memory, disk or PID
// pressure; CAPI's NodeHealthy condition (and so Machine Ready) waits for those.
func SetNodeReady(ctx context.Context, c client.Client, node *corev1.Node, ready bool, addrs []corev1.NodeAddress) error {
	base := node.DeepCopy()
	readyStatus, readyReason := corev1.ConditionFalse, "KubeletNotReady"
	if ready {
		readyStatus, readyReason = corev1.ConditionTrue, "KubeletReady"
	}
	setNodeCondition(node, corev1.NodeReady, readyStatus, readyReason)
	setNodeCondition(node, corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory")
	setNodeCondition(node, corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure")
	setNodeCondition(node, corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID")
	if addrs != nil {
		node.Status.Addresses = addrs
	}
	if err := c.Status().Patch(ctx, node, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("updating status of Node %s: %w", node.Name, err)
	}
	return nil
}

func setNodeCondition(node *corev1.Node, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) {
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: typ, Status: status, Reason: reason,
		Message: "set by the caplb test kubelet", LastHeartbeatTime: now, LastTransitionTime: now}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			if node.Status.Conditions[i].Status == status {
				cond.LastTransitionTime = node.Status.Conditions[i].LastTransitionTime
			}
			node.Status.Conditions[i] = cond
			return
		}
	}
	node.Status.Conditions = append(node.Status.Conditions, cond)
}
