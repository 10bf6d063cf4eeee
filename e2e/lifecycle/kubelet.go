//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// kubeadmManifests are the static pods whose mirror Pods a real control-plane machine's kubelet
// keeps: what KubeadmControlPlane reads. kube-vip's mirror Pod stays kubevip.go's, as its
// takeover scenarios create and delete it.
var kubeadmManifests = []string{kubeadm.EtcdManifest, kubeadm.APIManifest, kubeadm.ControllerManagerManifest}

// startKubelet runs the kubelet's API-facing half on a real control-plane machine, with its own
// credential: its HTTPS API (port-forward: KCP's etcd client reaches etcd-<node> through the
// endpoint and it) and its reports (Node status, Lease, the mirror Pods of kubeadm's static pods,
// their status from their probes). Node.destroy stops it.
func (n *Node) startKubelet() error {
	kc, err := kubeadm.KubeletClient(n.cp.Machine, n.NS)
	if err != nil {
		return err
	}
	api, err := kubeadm.StartKubeletAPI(n.NS, n.cp.Machine, kc)
	if err != nil {
		return err
	}
	r := &kubeadm.NodeReporter{Machine: n.cp.Machine, NS: n.NS, Client: kc, ProviderID: n.providerID,
		KubeletVersion: envtest.K8sVersion, Manifests: kubeadmManifests,
		Logf: func(format string, args ...any) { n.deps.lab.Logf("kubelet", format, args...) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	n.cp.stopKubelet = func() {
		cancel()
		<-done
		_ = api.Close()
	}
	return nil
}

// kcpEtcd is KubeadmControlPlane's own way to a workload cluster's etcd: its Management (the
// workload cluster's REST config from CAPI's ClusterCache, the etcd CA from <cluster>-etcd) and
// its Workload's ForwardEtcdLeadership and RemoveEtcdMember, whose etcd clients port-forward
// through the workload API server — the endpoint caplb serves — into etcd-<node>.
type kcpEtcd struct {
	mgmt *kcppkg.Management
	l    *Lab
}

func (l *Lab) newKCPEtcd() *kcpEtcd {
	return &kcpEtcd{l: l, mgmt: &kcppkg.Management{Client: l.Mgmt.Client, SecretCachingClient: l.Mgmt.Client,
		ClusterCache: l.capi.ClusterCache, EtcdDialTimeout: 10 * time.Second, EtcdCallTimeout: 15 * time.Second,
		ClientCertCache: cache.New[kcppkg.ClientCertEntry](context.Background(), 24*time.Hour)}}
}

// removeMember removes n's etcd member as KCP's pre-terminate step does: it finds the members and
// the leader through a surviving machine's etcd, moves leadership off n if n leads (to the
// newest survivor that takes it), then removes the member through the survivors. A member already gone
// is not an error; nor is a last machine (KCP removes no last member).
func (k *kcpEtcd) removeMember(ctx context.Context, n *Node) error {
	others := k.l.Nodes()
	sort.Slice(others, func(i, j int) bool { return others[i].Index < others[j].Index })
	var survivors []string // oldest first
	for _, o := range others {
		if o != n && o.cp != nil && o.cp.apiserver != nil {
			survivors = append(survivors, o.Name)
		}
	}
	if len(survivors) == 0 {
		return nil
	}
	cluster := &clusterv1.Cluster{}
	if err := k.l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: k.l.Namespace, Name: k.l.ClusterName}, cluster); err != nil {
		return err
	}
	w, err := k.mgmt.GetWorkloadCluster(ctx, cluster, "")
	if err != nil {
		return fmt.Errorf("KCP's workload cluster: %w", err)
	}
	member, leader, err := k.memberOf(ctx, n, survivors)
	if err != nil || member == nil {
		return err
	}
	if leader == member.ID {
		// KCP tries the up-to-date machines first: in a rollout, the newest.
		var errs []error
		for i := len(survivors) - 1; i >= 0; i-- {
			to := survivors[i]
			err := w.ForwardEtcdLeadership(ctx, n.Name, to)
			if err == nil {
				k.l.net.Logf("kcp", "%s: etcd leadership moved to %s through the endpoint", n.Name, to)
				break
			}
			k.l.net.Logf("kcp", "%s: moving etcd leadership to %s: %v", n.Name, to, err)
			errs = append(errs, err)
		}
		if len(errs) == len(survivors) {
			return fmt.Errorf("moving etcd leadership off %s: %w", n.Name, errors.Join(errs...))
		}
	}
	nodes := []*kcppkg.Node{{ObjectMeta: kcppkg.ObjectMeta{Name: n.Name}}}
	for _, s := range survivors {
		nodes = append(nodes, &kcppkg.Node{ObjectMeta: kcppkg.ObjectMeta{Name: s}})
	}
	if err := w.RemoveEtcdMember(ctx, member, nodes); err != nil {
		return err
	}
	k.l.net.Logf("kcp", "%s: etcd member %x removed through the endpoint", n.Name, member.ID)
	return nil
}

// memberOf is n's etcd member (by name; by peer URL for a learner that never started, which has
// none yet) and the leader's ID, read with KCP's etcd client through the first survivor that
// answers, as KCP's etcd health check reads them.
func (k *kcpEtcd) memberOf(ctx context.Context, n *Node, survivors []string) (*kcpetcd.Member, uint64, error) {
	cfg, err := k.l.capi.ClusterCache.GetRESTConfig(ctx, client.ObjectKey{Namespace: k.l.Namespace, Name: k.l.ClusterName})
	if err != nil {
		return nil, 0, err
	}
	shared := k.l.real.shared
	var errs []error
	for _, s := range survivors {
		c, err := kubeadm.KCPEtcdClient(ctx, cfg, shared["etcd/ca.crt"], shared["etcd/ca.key"], s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		members, err := c.Members(ctx)
		leader := c.LeaderID
		_ = c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range members {
			if m.Name == n.Name || (m.Name == "" && slices.Contains(m.PeerURLs, n.cp.PeerURL())) {
				return m, leader, nil
			}
		}
		return nil, leader, nil
	}
	return nil, 0, fmt.Errorf("KCP's etcd client reached no survivor of %s: %w", n.Name, errors.Join(errs...))
}
