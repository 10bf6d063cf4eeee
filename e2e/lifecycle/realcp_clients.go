//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// startClients runs real client-go clients through the VIP with kubeadm's admin.conf (a
// kubectl user, not system:masters): a writer and an informer on ConfigMaps of their own
// namespace, and a leader-elected loop with kube-controller-manager's timings.
func (l *Lab) startClients(ctx context.Context) (*clients.Run, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(l.real.admin)
	if err != nil {
		return nil, fmt.Errorf("admin.conf: %w", err)
	}
	// 15 s per request, where kubectl and the controllers set none (the API server's own limit
	// is 60 s): an etcd membership change on the lab's two loaded cores — a learner joining, the
	// leader removed — stalled a write for 5-6 s in three runs (the API server's log shows etcd's
	// Txn past its deadline), which no load balancer can shorten. The VIP's own stalls are
	// bounded by the prober's gap figure, which does not touch etcd.
	cfg.Dial, cfg.Timeout = l.DialClient, 15*time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle-clients"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("the clients' namespace: %w", err)
	}
	r, err := clients.Start(ctx, clients.Config{REST: cfg, Namespace: ns.Name})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !r.Leading() {
		if time.Now().After(deadline) {
			r.Stop(0)
			return nil, errors.New("the leader-elected client never led")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return r, nil
}
