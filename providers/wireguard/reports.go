package wireguard

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	wg "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// ReportConfigMapName is where gateway gw reports for lb: <clusterName>-caplb-gateway-<gw>, in
// lb's namespace, key report.json (api/wireguard/v1alpha1.Report). The gateway writes it; the manager
// only reads it, so a gateway needs no more than get on its Secret and create/update on its own
// ConfigMap, and keeps serving from its files when the management cluster is away.
func ReportConfigMapName(lb *lbv1.LoadBalancer, gw string) string {
	return GatewaySecretName(lb) + "-" + gw
}

// gatewayView is one gateway's latest report as the manager sees it.
type gatewayView struct {
	name string
	// fresh: a report exists and is younger than the staleness bound.
	fresh  bool
	why    string // when not fresh
	report wg.Report
}

// views reads every gateway's report. A missing, unparsable or stale report is a view that is
// not fresh (with the reason), never an error: a gateway that is down must not stop Ensure.
func (b *Backend) views(ctx context.Context, lb *lbv1.LoadBalancer) ([]gatewayView, error) {
	now := b.opts.Now.Now()
	out := make([]gatewayView, 0, len(lb.Spec.Backend.WireGuard.Gateways))
	for _, g := range lb.Spec.Backend.WireGuard.Gateways {
		v := gatewayView{name: g.Name}
		cm := &corev1.ConfigMap{}
		key := client.ObjectKey{Namespace: lb.Namespace, Name: ReportConfigMapName(lb, g.Name)}
		err := b.opts.Reader.Get(ctx, key, cm)
		switch {
		case apierrors.IsNotFound(err):
			v.why = "has not reported (no ConfigMap " + key.Name + ")"
		case err != nil:
			return nil, fmt.Errorf("reading gateway report %s: %w", key, err)
		default:
			r, err := wg.ParseReport([]byte(cm.Data[wg.ReportKey]))
			switch {
			case err != nil:
				v.why = fmt.Sprintf("has an unreadable report (ConfigMap %s key %s): %v", key.Name, wg.ReportKey, err)
			case now.Sub(r.Time) > b.staleAfter():
				v.why = fmt.Sprintf("last reported %s ago", now.Sub(r.Time).Truncate(time.Second))
				v.report = r
			default:
				v.fresh, v.report = true, r
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// serves reports whether a fresh view has the node in rotation: a key of it active and healthy.
func (v gatewayView) serves(node string) bool {
	if !v.fresh {
		return false
	}
	for _, m := range v.report.Status.Members {
		if m.Node == node && m.State == "active" && m.Healthy {
			return true
		}
	}
	return false
}

// quiesced reports whether a fresh view keeps node out of rotation (it lists the node as
// quiesced, or knows no key of it: then it sends it nothing), and the node's open connections
// through this gateway.
func (v gatewayView) quiesced(node string) (out bool, conns int) {
	known := false
	for _, m := range v.report.Status.Members {
		if m.Node == node {
			known = true
			conns += m.Connections
		}
	}
	return v.fresh && (!known || slices.Contains(v.report.QuiescedNodes, node)), conns
}
