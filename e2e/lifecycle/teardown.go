//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
)

// Teardown deletes the LoadBalancer and checks that caplb left nothing behind in either
// cluster (no pre-drain hook on a Machine, no membership or quiesce annotation on a Node, no
// address claim), then removes the agent's static pod from every machine, as an operator
// removing caplb would, and checks that no machine keeps the VIP or an nftables table of the
// agent's.
func (s *Scenario) Teardown(ctx context.Context) error {
	l := s.Lab
	s.step("delete the LoadBalancer")
	lb := &lbv1.LoadBalancer{}
	lb.Namespace, lb.Name = l.Namespace, s.lbName
	if err := l.Mgmt.Client.Delete(ctx, lb); err != nil {
		return err
	}
	if err := l.Mgmt.WaitGone(ctx, lb, goneTimeout); err != nil {
		return err
	}
	hook := lbv1.PreDrainHookAnnotation(s.lbName)
	ms, err := l.Machines(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if _, ok := m.Annotations[hook]; ok {
			return fmt.Errorf("machine %s keeps caplb's pre-drain hook after the LoadBalancer went", m.Name)
		}
	}
	nodes := &corev1.NodeList{}
	if err := l.WorkloadClient.List(ctx, nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		for _, k := range []string{agentv1.MembershipAnnotation, agentv1.QuiesceAnnotation} {
			if _, ok := n.Annotations[k]; ok {
				return fmt.Errorf("node %s keeps %s after the LoadBalancer went", n.Name, k)
			}
		}
	}
	claims := &ipamv1.IPAddressClaimList{}
	if err := harness.Poll(ctx, moveTimeout, "the address claim released", func(ctx context.Context) (bool, string, error) {
		if err := l.Mgmt.Client.List(ctx, claims, client.InNamespace(l.Namespace)); err != nil {
			return false, "", err
		}
		return len(claims.Items) == 0, fmt.Sprintf("%d claims", len(claims.Items)), nil
	}); err != nil {
		return err
	}
	sec := &corev1.Secret{}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName + "-caplb-agent"}, sec); !apierrors.IsNotFound(err) {
		return fmt.Errorf("the bootstrap Secret outlived its LoadBalancer (%v)", err)
	}
	s.step("caplb left no hook, annotation, claim or Secret behind; remove the agents' static pods")
	for _, n := range l.Nodes() {
		// The kubelet stops a static pod whose manifest goes: SIGTERM, then the grace period.
		if err := os.Remove(filepath.Join(n.Root, manifestPath)); err != nil {
			return err
		}
		if err := n.kubelet.Stop(10 * time.Second); err != nil {
			return fmt.Errorf("agent on %s: %w", n.Name, err)
		}
		if held, err := n.HoldsVIP(l.vip); err != nil || held {
			return fmt.Errorf("%s keeps the VIP after its agent stopped (%v)", n.Name, err)
		}
		out, err := n.NS.Run(ctx, "nft", "list", "tables")
		if err != nil {
			return err
		}
		if strings.Contains(out, "caplb") {
			return fmt.Errorf("%s keeps nftables tables after its agent stopped: %s", n.Name, out)
		}
	}
	s.step("no machine keeps the VIP or an nftables table")
	return nil
}
