//go:build linux

package kubeadm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/caplb/caplb/e2e/lab"
)

// The kubelet's annotations on a mirror Pod (k8s.io/kubernetes/pkg/kubelet/types).
const (
	ConfigMirrorAnnotation = "kubernetes.io/config.mirror"
	ConfigHashAnnotation   = "kubernetes.io/config.hash"
	ConfigSourceAnnotation = "kubernetes.io/config.source"
)

// nodeStatusPeriod is how often the kubelet reports its Node's status and renews its Lease
// (nodeStatusReportFrequency's and the lease's renew interval, 10 s each by default).
const nodeStatusPeriod = 10 * time.Second

// KubeletClient is the kubelet's client: kubelet.conf (system:node:<name>, its server the
// cluster's endpoint), dialling from the machine's network.
func KubeletClient(m Machine, ns *lab.Netns) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", m.Path(KubeletConfPath))
	if err != nil {
		return nil, fmt.Errorf("kubelet client of %s: %w", m.Name, err)
	}
	cfg.Dial = ns.DialContext
	cfg.UserAgent = "kubelet/" + m.Name + " (lab)"
	return kubernetes.NewForConfig(cfg)
}

// NodeReporter is what the kubelet tells the API server about its machine, with the node's own
// credential (what a kubelet may do, no more: the Node authorizer and NodeRestriction admit it):
// it registers the Node, reports it Ready with its addresses, kubelet port and version every
// 10 s, renews its Lease in kube-node-lease, and keeps one mirror Pod per static pod manifest
// (deleting those whose manifest went) whose status comes from the manifest's own probes, run
// in the machine's network as the kubelet runs them. KubeadmControlPlane reads exactly this:
// the control-plane Nodes, and each machine's etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler Pods' Ready condition.
type NodeReporter struct {
	Machine Machine
	NS      *lab.Netns
	Client  kubernetes.Interface
	// ProviderID is the Node's spec.providerID (the kubelet's --provider-id, from the bootstrap).
	ProviderID string
	// KubeletVersion is reported in the Node's nodeInfo.
	KubeletVersion string
	// Manifests are the static pods (manifest paths on the machine) it mirrors; nil: every
	// manifest in ManifestsDir.
	Manifests []string
	// Logf, when set, reports what failed (the reporter retries; a kubelet only logs).
	Logf func(format string, args ...any)

	lastNode time.Time
	node     *corev1.Node
	// have are the machine's Pods as last listed or written (a kubelet's watch keeps them;
	// the lab relists with each Node report, or after a failed write).
	have   map[string]*corev1.Pod
	sent   map[string]corev1.PodStatus
	probes map[string]*podProbes
}

// Run reports until ctx ends: probes every second, the Node and its Lease every 10 s.
func (r *NodeReporter) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := r.Once(ctx); err != nil && ctx.Err() == nil && r.Logf != nil {
			r.Logf("%s: kubelet: %v", r.Machine.Name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once runs one round: the Node and Lease when due, then every static pod's mirror and status.
func (r *NodeReporter) Once(ctx context.Context) error {
	if r.sent == nil {
		r.sent, r.probes = map[string]corev1.PodStatus{}, map[string]*podProbes{}
	}
	if time.Since(r.lastNode) >= nodeStatusPeriod || r.node == nil {
		if err := r.reportNode(ctx); err != nil {
			return err
		}
		if err := r.renewLease(ctx); err != nil {
			return err
		}
		r.lastNode, r.have = time.Now(), nil
	}
	if err := r.syncMirrors(ctx, r.node); err != nil {
		r.have = nil
		return err
	}
	return nil
}

func (r *NodeReporter) reportNode(ctx context.Context) error {
	nodes := r.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, r.Machine.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.Machine.Name, Labels: map[string]string{
			"kubernetes.io/hostname": r.Machine.Name, "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH,
			"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH,
		}}, Spec: corev1.NodeSpec{ProviderID: r.ProviderID}}
		node, err = nodes.Create(ctx, node, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering its Node: %w", err)
	}
	now := metav1.Now()
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: r.Machine.Addr.String()},
		{Type: corev1.NodeHostName, Address: r.Machine.Name}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = KubeletPort
	node.Status.NodeInfo.KubeletVersion = r.KubeletVersion
	node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
	} {
		c.LastHeartbeatTime, c.LastTransitionTime = now, now
		setNodeCondition(&node.Status, c)
	}
	if node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting its Node's status: %w", err)
	}
	r.node = node
	return nil
}

func setNodeCondition(st *corev1.NodeStatus, c corev1.NodeCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			if st.Conditions[i].Status == c.Status {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

func (r *NodeReporter) renewLease(ctx context.Context) error {
	leases := r.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, r.Machine.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, nerr := r.Client.CoreV1().Nodes().Get(ctx, r.Machine.Name, metav1.GetOptions{})
		if nerr != nil {
			return fmt.Errorf("the Lease's owner: %w", nerr)
		}
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: r.Machine.Name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &r.Machine.Name, LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &now}}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else if err == nil {
		lease.Spec.RenewTime = &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renewing its Lease: %w", err)
	}
	return nil
}

// syncMirrors keeps a mirror Pod per static pod manifest on the machine, its status from the
// probes, and deletes the mirror Pods of manifests that went.
func (r *NodeReporter) syncMirrors(ctx context.Context, node *corev1.Node) error {
	manifests, err := r.manifests()
	if err != nil {
		return err
	}
	// The kubelet knows its Pods from a list by node (the Node authorizer lets it get only Pods
	// bound to it, so a missing mirror Pod cannot be read by name).
	pods := r.Client.CoreV1().Pods(metav1.NamespaceSystem)
	if r.have == nil {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
		if err != nil {
			return fmt.Errorf("listing its Pods: %w", err)
		}
		r.have = map[string]*corev1.Pod{}
		for i := range list.Items {
			r.have[list.Items[i].Name] = &list.Items[i]
		}
	}
	have := r.have
	want := map[string]bool{}
	for _, path := range manifests {
		static, err := ReadStaticPod(path)
		if err != nil {
			return err
		}
		mirror := MirrorOf(static, node)
		want[mirror.Name] = true
		cur, ok := have[mirror.Name]
		switch {
		case !ok:
			cur, err = pods.Create(ctx, mirror, metav1.CreateOptions{})
			delete(r.sent, mirror.Name)
		case cur.Annotations[ConfigMirrorAnnotation] != mirror.Annotations[ConfigMirrorAnnotation]:
			// The manifest changed: the kubelet replaces the mirror Pod.
			if err = pods.Delete(ctx, cur.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err == nil {
				cur, err = pods.Create(ctx, mirror, metav1.CreateOptions{})
				delete(r.sent, mirror.Name)
				delete(r.probes, mirror.Name)
			}
		}
		if err != nil {
			return fmt.Errorf("mirror Pod %s: %w", mirror.Name, err)
		}
		have[cur.Name] = cur
		pp := r.probes[mirror.Name]
		if pp == nil {
			pp = &podProbes{}
			r.probes[mirror.Name] = pp
		}
		st := pp.status(ctx, r.NS.DialContext, static, r.Machine)
		if prev, ok := r.sent[cur.Name]; ok && apiequality.Semantic.DeepEqual(prev, st) {
			continue
		}
		upd := cur.DeepCopy()
		upd.Status = st
		if upd, err = pods.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("status of mirror Pod %s: %w", cur.Name, err)
		}
		have[cur.Name] = upd
		r.sent[cur.Name] = st
	}
	for name, p := range have {
		if _, mirror := p.Annotations[ConfigMirrorAnnotation]; mirror && !want[name] && r.mirrors(name) {
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting mirror Pod %s: %w", name, err)
			}
			delete(have, name)
			delete(r.sent, name)
			delete(r.probes, name)
		}
	}
	return nil
}

// mirrors says whether the mirror Pod name is one of the reporter's (with Manifests, a kubeadm
// manifest's pod is named after its file).
func (r *NodeReporter) mirrors(name string) bool {
	if r.Manifests == nil {
		return true
	}
	for _, m := range r.Manifests {
		if strings.TrimSuffix(filepath.Base(m), ".yaml")+"-"+r.Machine.Name == name {
			return true
		}
	}
	return false
}

// manifests are the static pod manifests it mirrors that exist on the machine now.
func (r *NodeReporter) manifests() ([]string, error) {
	if r.Manifests == nil {
		all, err := filepath.Glob(r.Machine.Path(ManifestsDir + "/*.yaml"))
		sort.Strings(all)
		return all, err
	}
	var out []string
	for _, m := range r.Manifests {
		if _, err := os.Stat(r.Machine.Path(m)); err == nil {
			out = append(out, r.Machine.Path(m))
		}
	}
	return out, nil
}

// ReadStaticPod reads a static pod manifest from a machine's disk (a host path), with the
// kubelet's hash of it.
func ReadStaticPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		return nil, fmt.Errorf("static pod %s: %w", path, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	h := sha256.Sum256(b)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[ConfigHashAnnotation] = hex.EncodeToString(h[:16])
	return pod, nil
}

// MirrorOf is the mirror Pod the kubelet creates for a static pod on node: named
// <pod>-<node>, bound to the node and owned by it, with the kubelet's config annotations.
func MirrorOf(pod *corev1.Pod, node *corev1.Node) *corev1.Pod {
	m := pod.DeepCopy()
	m.Name = pod.Name + "-" + node.Name
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[ConfigMirrorAnnotation] = pod.Annotations[ConfigHashAnnotation]
	m.Annotations[ConfigSourceAnnotation] = "file"
	m.Spec.NodeName = node.Name
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		Controller: ptr.To(true)}}
	m.Status = corev1.PodStatus{}
	return m
}

func ptrTo[T any](v T) *T { return &v }

// containerName names the static pod's (only) container in messages.
func containerName(p *corev1.Pod) string {
	if len(p.Spec.Containers) == 0 {
		return ""
	}
	return strings.TrimSpace(p.Spec.Containers[0].Name)
}
