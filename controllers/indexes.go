package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Field indexes on the manager's cache. Their names carry a caplb prefix so that they cannot
// clash with indexes CAPI's own reconcilers register when they share a manager (tests do).
const (
	// indexLBClusterName indexes LoadBalancers by spec.clusterName: Machine and Cluster events
	// map to LoadBalancers through it.
	indexLBClusterName = "caplb.loadbalancer.spec.clusterName"
	// indexLBTargetKind indexes LoadBalancers by spec.targetKind.kind ("Node" for local Node
	// targets only, remoteNodeIndexValue for remote ones): Node events map to the
	// LoadBalancers that target Nodes through it.
	indexLBTargetKind = "caplb.loadbalancer.spec.targetKind"
	// indexMachineClusterName indexes Machines by spec.clusterName: a LoadBalancer lists its
	// candidates through it instead of scanning the namespace.
	indexMachineClusterName = "caplb.machine.spec.clusterName"
	// indexMemberOf indexes Machines and Nodes by the LoadBalancers that marked them: one value
	// per name annotation ("name:<value>") and per caplb pre-drain hook ("hook:<suffix>"), so
	// that half-done states (a hook without the name annotation) are found too.
	indexMemberOf = "caplb.memberOf"
)

// remoteNodeIndexValue is indexLBTargetKind's value for remote Node targets.
const remoteNodeIndexValue = "Node/remote"

func memberIndexName(owner string) string  { return "name:" + owner }
func memberIndexHook(lbName string) string { return "hook:" + hookSuffix(lbName) }

// hookKeyPrefix is the start of every pre-drain hook key caplb writes; preTermKeyPrefix of every
// pre-terminate hook key.
var (
	hookKeyPrefix    = clusterv1.PreDrainDeleteHookAnnotationPrefix + "/caplb-"
	preTermKeyPrefix = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/caplb-"
)

func memberOfValues(obj client.Object) []string {
	var out []string
	for k, v := range obj.GetAnnotations() {
		switch {
		case k == lbv1.NameAnnotation && v != "":
			out = append(out, memberIndexName(v))
		case strings.HasPrefix(k, hookKeyPrefix), strings.HasPrefix(k, preTermKeyPrefix):
			out = append(out, "hook:"+k[strings.Index(k, "/")+1:])
		}
	}
	return out
}

// setupIndexes registers the cache indexes. Nodes are indexed only with Node targets enabled, and
// Machines only when the cluster serves them: an index starts an informer, and the manager has no
// access to Nodes otherwise, nor can an informer of a missing kind sync.
func setupIndexes(ctx context.Context, fi client.FieldIndexer, nodeTargets, machines bool) error {
	type index = struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}
	indexes := []index{
		{&lbv1.LoadBalancer{}, indexLBClusterName, func(o client.Object) []string {
			if n := o.(*lbv1.LoadBalancer).Spec.ClusterName; n != "" {
				return []string{n}
			}
			return nil
		}},
		{&lbv1.LoadBalancer{}, indexLBTargetKind, func(o client.Object) []string {
			spec := &o.(*lbv1.LoadBalancer).Spec
			switch {
			case spec.LocalNodes():
				return []string{lbv1.NodeKind}
			case spec.RemoteNodes():
				// A workload cluster's Nodes: the management cluster's Node events are not theirs.
				return []string{remoteNodeIndexValue}
			}
			return []string{lbv1.MachineKind}
		}},
	}
	if machines {
		indexes = append(indexes, index{&clusterv1.Machine{}, indexMachineClusterName, func(o client.Object) []string {
			if n := o.(*clusterv1.Machine).Spec.ClusterName; n != "" {
				return []string{n}
			}
			return nil
		}}, index{&clusterv1.Machine{}, indexMemberOf, memberOfValues})
	}
	if nodeTargets {
		indexes = append(indexes, index{&corev1.Node{}, indexMemberOf, memberOfValues})
	}
	for _, ix := range indexes {
		if err := fi.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}
