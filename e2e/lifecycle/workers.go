//go:build linux

package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/testinfra"
)

// Worker machines: the lab's second kind of machine, for a LoadBalancer on the worker Machines
// of a MachineDeployment (config/samples/cluster_kubeadm_arp_ingress.yaml). CAPI's own
// MachineDeployment and MachineSet reconcilers create and delete the Machines; the lab's
// infrastructure provider boots each one from the worker LoadBalancer's Secret with the files of
// the sample's KubeadmConfigTemplate, written as cloud-init writes them (there is no kubeadm
// bootstrap provider in the lab: the Machines' spec.bootstrap.dataSecretName names caplb's
// Secret, as the control-plane Machines name theirs). A worker runs what a kubeadm worker with a
// host-network ingress controller runs: the kubelet's credential and the cluster CA (kubeadm
// join), the agent's static pod, and an ingress stand-in serving HTTPS on 443 and TCP on 80.

// ingressSample is the sample the worker LoadBalancer, MachineDeployment and workers' files come
// from.
const ingressSample = "cluster_kubeadm_arp_ingress.yaml"

// ingressTemplate is the TestMachineTemplate the lab's MachineDeployment clones.
const ingressTemplate = "ingress"

// Ports the ingress stand-in serves on a worker (the sample's targetPort and extraPorts).
const (
	ingressHTTPSPort = 443
	ingressHTTPPort  = 80
)

// bootRole says how to boot a machine: a control-plane one (the zero value) or a worker from
// the worker LoadBalancer's Secret.
type bootRole struct {
	worker bool
	// kubeVIP: a control-plane machine booted with kube-vip's files (kubevip.go).
	kubeVIP bool
	// secret is the worker LoadBalancer's bootstrap Secret; files come from the sample's
	// KubeadmConfigTemplate.
	secret string
	files  []bootFile
}

// roleOf finds how to boot a TestMachine: from its Machine's spec.bootstrap.dataSecretName once
// the Machine controller adopted it (ok false until then). Without workers every machine is a
// control-plane one, booted at once as before.
func (r *infra) roleOf(ctx context.Context, tm *unstructured.Unstructured) (bootRole, bool, error) {
	if r.workers == nil && r.kubeVIP == nil {
		return bootRole{}, true, nil
	}
	for _, ref := range tm.GetOwnerReferences() {
		if ref.Kind != "Machine" {
			continue
		}
		m := &clusterv1.Machine{}
		if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: tm.GetNamespace(), Name: ref.Name}, m); err != nil {
			return bootRole{}, false, client.IgnoreNotFound(err)
		}
		for _, role := range []*bootRole{r.workers, r.kubeVIP} {
			if s := m.Spec.Bootstrap.DataSecretName; role != nil && s != nil && *s == role.secret {
				return *role, true, nil
			}
		}
		return bootRole{}, true, nil
	}
	return bootRole{}, false, nil
}

// bootWorker brings up a worker after its bootstrap files are written: what kubeadm join leaves
// (the cluster CA, the kubelet's kubeconfig and client certificate), the agent's static pod, the
// ingress stand-in, and the Node the kubelet registers (no control-plane role).
func (d *nodeDeps) bootWorker(ctx context.Context, n *Node, secret *corev1.Secret) error {
	// The ingress certificate names the VIP clients dial: the one the agent's file serves.
	cfg, err := agentv1.Parse(secret.Data[agentv1.SecretConfigKey])
	if err != nil || len(cfg.VIPs) == 0 {
		return fmt.Errorf("the worker's agent.yaml names no VIP: %v", err)
	}
	if err := writeFile(filepath.Join(n.Root, caPath), d.ca.PEM, 0o644); err != nil {
		return err
	}
	dir := filepath.Join(filepath.Dir(n.rootfs), "ingress")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	crt, key, err := d.ca.IssueServing(dir, "ingress", n.Name, n.Addr.String(), cfg.VIPs[0])
	if err != nil {
		return err
	}
	if err := d.workload.writeKubeletConfig(ctx, n.Name, n.Root); err != nil {
		return err
	}
	if n.proxy, err = lab.ProxyInto(n.NS, nodeAPIListen, d.workload.hostPort); err != nil {
		return err
	}
	if err := n.startAgent(); err != nil {
		return err
	}
	// An ingress controller ends a kept-alive connection after a number of requests (nginx's
	// keepalive_requests, 1000 by default; Envoy's max_requests_per_connection): the stand-in
	// does so at random, 1 request in 50, which moves a busy client within the sample's busyDrain
	// rather than leave it to the release's reset (a CI run saw that reset cut an answer's body).
	if n.standin, err = n.NS.Start(n.Name+"-ingress", []string{d.bins.Standin, "-name", n.Name,
		"-api-listen", ":" + strconv.Itoa(ingressHTTPSPort), "-service-listen", ":" + strconv.Itoa(ingressHTTPPort),
		"-cert", crt, "-key", key, "-fail-file", n.failFile, "-goaway-chance", "0.02"}, nil); err != nil {
		return err
	}
	return registerNode(ctx, d.workload.client, n.Name, n.providerID, n.Addr, map[string]string{corev1.LabelHostname: n.Name})
}

// CreateIngress creates the sample's worker LoadBalancer (VIP from the lab's pool, the lab's
// drain), a TestMachineTemplate and the sample's MachineDeployment with replicas Machines booted
// from the LoadBalancer's Secret. It returns the LoadBalancer and the MachineDeployment's name.
func (l *Lab) CreateIngress(ctx context.Context, replicas int32) (*lbv1.LoadBalancer, string, error) {
	objs, err := sampleKinds(ingressSample, l.Namespace)
	if err != nil {
		return nil, "", err
	}
	lb := &lbv1.LoadBalancer{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["LoadBalancer"].Object, lb); err != nil {
		return nil, "", err
	}
	drain := lbv1.Duration{Duration: labDrainPeriod}
	lb.Spec.Quiesce.DrainPeriod = &drain
	if err := l.Mgmt.Client.Create(ctx, lb); err != nil {
		return nil, "", fmt.Errorf("creating the worker LoadBalancer: %w", err)
	}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetGroupVersionKind(testinfra.MachineGVK.GroupVersion().WithKind(testinfra.MachineKind + "Template"))
	tmpl.SetNamespace(l.Namespace)
	tmpl.SetName(ingressTemplate)
	tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{}}}
	if err := l.Mgmt.Client.Create(ctx, tmpl); err != nil {
		return nil, "", fmt.Errorf("creating TestMachineTemplate: %w", err)
	}
	md := objs["MachineDeployment"]
	spec := md.Object["spec"].(map[string]any)
	spec["replicas"] = int64(replicas)
	ts := spec["template"].(map[string]any)["spec"].(map[string]any)
	// No kubeadm bootstrap provider here: the Machine's bootstrap data is caplb's Secret, whose
	// files the lab's provider writes as the sample's KubeadmConfigTemplate says.
	ts["bootstrap"] = map[string]any{"dataSecretName": lbv1.AgentSecretName(lb)}
	ts["infrastructureRef"] = map[string]any{"apiGroup": testinfra.Group, "kind": testinfra.MachineKind + "Template", "name": ingressTemplate}
	if err := l.Mgmt.Client.Create(ctx, md); err != nil {
		return nil, "", fmt.Errorf("creating MachineDeployment: %w", err)
	}
	return lb, md.GetName(), nil
}

// sampleKinds decodes a sample's objects by kind (the last of each), moved into namespace.
func sampleKinds(sample, namespace string) (map[string]*unstructured.Unstructured, error) {
	data, err := samples.FS.ReadFile(sample)
	if err != nil {
		return nil, err
	}
	objs, err := harness.Decode(data)
	if err != nil {
		return nil, err
	}
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		o.SetNamespace(namespace)
		out[o.GetKind()] = o
	}
	for _, k := range []string{"LoadBalancer", "MachineDeployment"} {
		if out[k] == nil {
			return nil, fmt.Errorf("sample %s has no %s", sample, k)
		}
	}
	return out, nil
}

// RollOut asks the MachineDeployment to replace every Machine (spec.rollout.after: now), as
// `clusterctl alpha rollout restart` does.
func (l *Lab) RollOut(ctx context.Context, md string) error {
	body := fmt.Sprintf(`{"spec":{"rollout":{"after":%q}}}`, time.Now().UTC().Format(time.RFC3339))
	obj := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: md}}
	return l.Mgmt.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(body)))
}

// MachinesOf lists the Machines of a MachineDeployment.
func (l *Lab) MachinesOf(ctx context.Context, md string) ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := l.Mgmt.Client.List(ctx, list, client.InNamespace(l.Namespace),
		client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// HoldersOf lists, sorted, the machines whose kernel holds vip.
func (l *Lab) HoldersOf(vip netip.Addr) ([]string, error) {
	var out []string
	for _, n := range l.Nodes() {
		ok, err := n.HoldsVIP(vip)
		if err != nil {
			if l.Node(n.Name) == nil {
				continue // destroyed while we looked
			}
			return nil, err
		}
		if ok {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// workerRole is how the lab boots the sample's workers: from the worker LoadBalancer's Secret
// with the sample's KubeadmConfigTemplate files.
func (l *Lab) workerRole() (*bootRole, error) {
	objs, err := sampleKinds(ingressSample, l.Namespace)
	if err != nil {
		return nil, err
	}
	lb := &lbv1.LoadBalancer{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs["LoadBalancer"].Object, lb); err != nil {
		return nil, err
	}
	files, err := lab.SampleWorkerBootFiles(ingressSample)
	if err != nil {
		return nil, err
	}
	return &bootRole{worker: true, secret: lbv1.AgentSecretName(lb), files: files}, nil
}
