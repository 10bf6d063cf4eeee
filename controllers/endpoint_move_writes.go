package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers/endpointmove"
)

// doMoveStep makes one step's write. Each reads the object, rewrites it with the pure
// endpointmove function and writes it only when that reports a change, guarded by the read
// resourceVersion: a step repeated after a restart writes nothing, and a
// concurrent writer makes the patch fail (Conflict) rather than be overwritten.
func (r *LoadBalancerReconciler) doMoveStep(ctx context.Context, s *scope, m endpointmove.Move, step lbv1.EndpointMoveStep) (bool, error) {
	lb := s.lb
	switch step {
	case lbv1.MoveStepClusterInfo:
		return r.rewriteWorkloadConfigMap(ctx, s, endpointmove.ClusterInfoNamespace, endpointmove.ClusterInfoName, m.RewriteClusterInfo)
	case lbv1.MoveStepKubeadmConfig:
		return r.rewriteWorkloadConfigMap(ctx, s, endpointmove.KubeadmConfigNamespace, endpointmove.KubeadmConfigName, m.RewriteKubeadmConfig)
	case lbv1.MoveStepKubeProxy:
		changed, err := r.rewriteWorkloadConfigMap(ctx, s, endpointmove.KubeProxyNamespace, endpointmove.KubeProxyName, m.RewriteKubeProxy)
		if err != nil || lb.Spec.TakeOverEndpointFrom == nil || !lb.Spec.TakeOverEndpointFrom.RestartKubeProxy {
			return changed, err
		}
		restarted, err := r.restartKubeProxy(ctx, s, m)
		return changed || restarted, err
	case lbv1.MoveStepKubeconfigSecret:
		sec := &corev1.Secret{}
		key := client.ObjectKey{Namespace: lb.Namespace, Name: lb.Spec.ClusterName + "-kubeconfig"}
		if err := r.Client.Get(ctx, key, sec); err != nil {
			return false, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		changed, err := m.RewriteKubeconfigSecret(sec)
		if err != nil || !changed {
			return false, err
		}
		// An update carries the read resourceVersion: the same guard as the patches' lock.
		if err := r.Client.Update(ctx, sec); err != nil {
			return false, fmt.Errorf("updating Secret %s: %w", key, err)
		}
		return true, nil
	case lbv1.MoveStepReleaseOld:
		old := &lbv1.LoadBalancer{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: lb.Status.EndpointMove.From}, old)
		if apierrors.IsNotFound(err) || (err == nil && !old.Spec.PublishesClusterEndpoint()) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading LoadBalancer %s: %w", lb.Status.EndpointMove.From, err)
		}
		orig := old.DeepCopy()
		old.Spec.PublishClusterEndpoint = ptr.To(false)
		if err := r.Client.Patch(ctx, old, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, fmt.Errorf("setting LoadBalancer %s spec.publishClusterEndpoint false: %w", old.Name, err)
		}
		return true, nil
	case lbv1.MoveStepClusterEndpoint:
		return r.switchCluster(ctx, s, m)
	case lbv1.MoveStepPublish:
		return publishFlip(lb), nil
	}
	return false, fmt.Errorf("no write for step %q", step)
}

// restartKubeProxy sets the kube-proxy DaemonSet's pod-template annotation to E2 (restartKubeProxy):
// its Pods restart onto the rewritten ConfigMap. A DaemonSet that already names E2 is left alone,
// so the step repeated after a restart restarts nothing twice; a cluster without the DaemonSet
// (kube-proxy replaced by a CNI) has nothing to restart.
func (r *LoadBalancerReconciler) restartKubeProxy(ctx context.Context, s *scope, m endpointmove.Move) (bool, error) {
	wc, err := r.ClusterCache.GetClient(ctx, client.ObjectKeyFromObject(s.cluster))
	if err != nil {
		return false, fmt.Errorf("reaching workload cluster %s: %w", s.cluster.Name, err)
	}
	ds := &appsv1.DaemonSet{}
	key := client.ObjectKey{Namespace: endpointmove.KubeProxyNamespace, Name: endpointmove.KubeProxyName}
	if err := wc.Get(ctx, key, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading DaemonSet %s of workload cluster %s: %w", key, s.cluster.Name, err)
	}
	want := net.JoinHostPort(m.New.Host, strconv.Itoa(int(m.New.Port)))
	if ds.Spec.Template.Annotations[lbv1.KubeProxyEndpointAnnotation] == want {
		return false, nil
	}
	orig := ds.DeepCopy()
	if ds.Spec.Template.Annotations == nil {
		ds.Spec.Template.Annotations = map[string]string{}
	}
	ds.Spec.Template.Annotations[lbv1.KubeProxyEndpointAnnotation] = want
	if err := wc.Patch(ctx, ds, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("restarting DaemonSet %s of workload cluster %s: %w", key, s.cluster.Name, err)
	}
	return true, nil
}

// rewriteWorkloadConfigMap reads a ConfigMap of the workload cluster (live: the ClusterCache
// does not cache ConfigMaps), rewrites it and patches it when that changed it.
func (r *LoadBalancerReconciler) rewriteWorkloadConfigMap(ctx context.Context, s *scope, ns, name string,
	rewrite func(*corev1.ConfigMap) (bool, error)) (bool, error) {
	if r.ClusterCache == nil {
		return false, errors.New("the manager has no ClusterCache to reach the workload cluster")
	}
	wc, err := r.ClusterCache.GetClient(ctx, client.ObjectKeyFromObject(s.cluster))
	if err != nil {
		return false, fmt.Errorf("reaching workload cluster %s: %w", s.cluster.Name, err)
	}
	cm := &corev1.ConfigMap{}
	if err := wc.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return false, fmt.Errorf("reading ConfigMap %s/%s of workload cluster %s: %w", ns, name, s.cluster.Name, err)
	}
	orig := cm.DeepCopy()
	changed, err := rewrite(cm)
	if err != nil || !changed {
		return false, err
	}
	if err := wc.Patch(ctx, cm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("patching ConfigMap %s/%s of workload cluster %s: %w", ns, name, s.cluster.Name, err)
	}
	return true, nil
}

// switchCluster writes E2 to the Cluster's spec.controlPlaneEndpoint, naming this LoadBalancer
// as its publisher in the same patch (decideAdoption reads it), with a Warning event: caplb
// otherwise never overwrites a Cluster's endpoint.
func (r *LoadBalancerReconciler) switchCluster(ctx context.Context, s *scope, m endpointmove.Move) (bool, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cluster), cluster); err != nil {
		return false, fmt.Errorf("reading Cluster %s: %w", s.cluster.Name, err)
	}
	if clusterEndpointOf(cluster) == m.New {
		return false, nil
	}
	orig := cluster.DeepCopy()
	cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: m.New.Host, Port: m.New.Port}
	anns := cluster.GetAnnotations()
	if anns == nil {
		anns = map[string]string{}
	}
	anns[lbv1.EndpointPublishedByAnnotation] = s.lb.Name
	cluster.SetAnnotations(anns)
	if err := r.Client.Patch(ctx, cluster, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("switching Cluster %s spec.controlPlaneEndpoint: %w", cluster.Name, err)
	}
	s.cluster = cluster
	if from := s.lb.Status.EndpointMove.From; from == s.lb.Name {
		r.event(s.lb, cluster, true, lbv1.EventClusterEndpointMoved, "MoveEndpoint",
			"moved Cluster %s spec.controlPlaneEndpoint from %s:%d (the address of a member that left) to %s:%d (another member's)",
			cluster.Name, m.Old.Host, m.Old.Port, m.New.Host, m.New.Port)
	} else {
		r.event(s.lb, cluster, true, lbv1.EventClusterEndpointMoved, "MoveEndpoint",
			"moved Cluster %s spec.controlPlaneEndpoint from %s:%d (LoadBalancer %s) to %s:%d; the old endpoint stays served until LoadBalancer %s is deleted",
			cluster.Name, m.Old.Host, m.Old.Port, from, m.New.Host, m.New.Port, from)
	}
	return true, nil
}
