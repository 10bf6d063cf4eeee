package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// nodeAPI connects the agent to its own Node object with the kubelet's
// credential (which may read Nodes and modify only its own): it reads the
// membership, the quiesce and disabled annotations and the
// exclude-from-external-load-balancers label, and writes the agent's report
// in the agent-status annotation. Failover never depends on it.
type nodeAPI struct {
	cfg   agentv1.NodeAPIConfig
	log   logr.Logger
	agent *Agent
	store *memberStore

	client nodeClient
	// minPatch spaces status writes; pollStatus is how often the report is
	// compared with the last one written.
	minPatch, pollStatus time.Duration
	// wrote is the last report written (UpdatedAt cleared) and when.
	wrote    agentv1.AgentStatus
	wroteAt  time.Time
	hasWrote bool
	// sentQuiesce is the last request sent to the agent (sent on change).
	sentQuiesce string
	quiesceSent bool
}

func (n *nodeAPI) run(ctx context.Context) {
	if n.minPatch == 0 {
		n.minPatch = time.Second
	}
	if n.pollStatus == 0 {
		n.pollStatus = 200 * time.Millisecond
	}
	if n.client == nil {
		c, err := n.connect(ctx)
		if err != nil {
			return
		}
		n.client = c
	}
	go n.reportLoop(ctx)
	n.watchLoop(ctx)
}

// connect waits for the kubeconfig (kubeadm writes kubelet.conf late in
// init) and builds a client from it.
func (n *nodeAPI) connect(ctx context.Context) (nodeClient, error) {
	logged := false
	for {
		if _, err := os.Stat(n.cfg.Kubeconfig); err == nil {
			rc, err := clientcmd.BuildConfigFromFlags("", n.cfg.Kubeconfig)
			if err == nil {
				rc.UserAgent = "caplb-agent/" + n.cfg.NodeName
				rc.QPS, rc.Burst = 5, 10
				c, err := newRESTNodeClient(rc)
				if err == nil {
					n.log.Info("Node API connected", "kubeconfig", n.cfg.Kubeconfig, "node", n.cfg.NodeName)
					return c, nil
				}
			}
			n.log.Info("nodeAPI.kubeconfig unusable; retrying", "kubeconfig", n.cfg.Kubeconfig, "error", err.Error())
		} else if !logged {
			n.log.Info("waiting for nodeAPI.kubeconfig to appear", "kubeconfig", n.cfg.Kubeconfig)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// watchLoop watches its own Node (field selector on the name: the kubelet's
// credential may watch that) and re-reads it every resyncInterval.
func (n *nodeAPI) watchLoop(ctx context.Context) {
	sel := fields.OneTermEqualSelector("metadata.name", n.cfg.NodeName).String()
	for ctx.Err() == nil {
		list, err := n.client.list(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			n.log.V(1).Info("reading the Node failed; retrying", "error", err.Error())
			n.sleep(ctx, time.Second)
			continue
		}
		for i := range list.Items {
			n.apply(&list.Items[i])
		}
		if len(list.Items) == 0 {
			// No Node yet (kubelet registers after the agent starts).
			n.sleep(ctx, time.Second)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, n.cfg.ResyncInterval.Duration)
		w, err := n.client.watch(wctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			cancel()
			n.log.V(1).Info("watching the Node failed; retrying", "error", err.Error())
			n.sleep(ctx, time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			if node, ok := ev.Object.(*corev1.Node); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				n.apply(node)
			}
		}
		w.Stop()
		cancel()
	}
}

func (n *nodeAPI) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// apply takes the membership and the quiesce request from node.
func (n *nodeAPI) apply(node *corev1.Node) {
	if s, ok := node.Annotations[agentv1.MembershipAnnotation]; ok {
		d, err := agentv1.ParseMembership(s)
		if err != nil {
			n.log.Info("ignoring the Node's membership annotation", "error", err.Error())
		} else {
			n.store.offer(d, "node")
		}
	}
	q := quiesceFromNode(node)
	if n.quiesceSent && q == n.sentQuiesce {
		return
	}
	n.sentQuiesce, n.quiesceSent = q, true
	if q != "" {
		n.log.Info("the Node asks this agent to stay out", "reason", q)
	} else {
		n.log.Info("the Node no longer asks this agent to stay out")
	}
	n.agent.requestQuiesce("node", q)
}

// quiesceFromNode says why the Node asks its agent to stay out, "" if not.
func quiesceFromNode(node *corev1.Node) string {
	if v, ok := node.Annotations[agentv1.QuiesceAnnotation]; ok {
		if v == "" {
			v = "requested"
		}
		return "quiesce annotation: " + v
	}
	if v, ok := node.Annotations[agentv1.DisabledAnnotation]; ok {
		if v == "" {
			v = "set"
		}
		return "disabled annotation: " + v
	}
	// Not ExcludeFromExternalLBLabel: kubeadm's mark-control-plane puts it on every
	// control-plane Node (it keeps Service load balancers off them), so honouring it quiesced
	// every member of a real kubeadm control plane.
	return ""
}

// reportLoop writes the agent's report on change (at most every minPatch)
// and every resyncInterval.
func (n *nodeAPI) reportLoop(ctx context.Context) {
	t := time.NewTicker(n.pollStatus)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r := n.agent.AgentStatus()
		cmp := r
		cmp.UpdatedAt = metav1.MicroTime{}
		since := time.Since(n.wroteAt)
		changed := !n.hasWrote || cmp != n.wrote
		if !(changed && since >= n.minPatch) && since < n.cfg.ResyncInterval.Duration {
			continue
		}
		if err := n.patch(ctx, r); err != nil {
			n.log.V(1).Info("writing the agent status on the Node failed; retrying", "error", err.Error())
			n.wroteAt = time.Now() // rate-limit retries too
			continue
		}
		n.wrote, n.wroteAt, n.hasWrote = cmp, time.Now(), true
	}
}

// patch writes the report with a merge patch on metadata.annotations only.
func (n *nodeAPI) patch(ctx context.Context, r agentv1.AgentStatus) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		agentv1.AgentStatusAnnotation: r.String(),
	}}})
	if err != nil {
		return err
	}
	if err := n.client.patch(ctx, n.cfg.NodeName, body); err != nil {
		return fmt.Errorf("patch Node %s: %w", n.cfg.NodeName, err)
	}
	return nil
}
