package controllers

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// pausedCondition is CAPI's pause rule (util/paused): paused when the Cluster has
// spec.paused=true or the LoadBalancer carries the cluster.x-k8s.io/paused annotation.
func pausedCondition(cluster *clusterv1.Cluster, lb *lbv1.LoadBalancer) metav1.Condition {
	var why []string
	if cluster != nil && ptr.Deref(cluster.Spec.Paused, false) {
		why = append(why, "Cluster spec.paused is set to true")
	}
	if annotations.HasPaused(lb) {
		why = append(why, "LoadBalancer has the "+clusterv1.PausedAnnotation+" annotation")
	}
	if len(why) > 0 {
		return metav1.Condition{Type: lbv1.PausedCondition, Status: metav1.ConditionTrue,
			Reason: lbv1.PausedReason, Message: strings.Join(why, ", ")}
	}
	return metav1.Condition{Type: lbv1.PausedCondition, Status: metav1.ConditionFalse, Reason: lbv1.NotPausedReason}
}
