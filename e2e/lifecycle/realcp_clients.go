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
	return l.startClientsAt(ctx, "", "lifecycle-clients")
}

// startClientsAt is startClients through server (host:port; empty: admin.conf's, the VIP), in
// a namespace of their own (their Lease is in it).
func (l *Lab) startClientsAt(ctx context.Context, server, namespace string) (*clients.Run, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(l.real.admin)
	if err != nil {
		return nil, fmt.Errorf("admin.conf: %w", err)
	}
	if server != "" {
		cfg.Host = "https://" + server
	}
	// No rest.Config.Timeout: it would cut every watch too (the informer then relists every
	// 15 s, and a relist hides a lost event). The writer bounds each request itself
	// (clients.WriteTimeout) and a hung watch shows as a write the informer never delivered.
	cfg.Dial = l.DialClient
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
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
