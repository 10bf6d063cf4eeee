// Command demo is `make demo`: it starts a real test control plane, CAPI's own Cluster and
// Machine reconcilers and caplb's manager in this process, applies the sample manifests in
// config/samples/demo (embedded), and prints a timeline of caplb at work: the endpoint published
// before any Machine exists, members going active, a member disabled and restored, and a member
// deleted through caplb's pre-drain hook. It exits 0 when every step was observed, 1 otherwise.
//
// No arguments. Set CAPLB_TEST_LOG=1 to see the controllers' logs on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
	"github.com/caplb/caplb/e2e/harness"
)

// Names in config/samples/demo.
const (
	namespace   = "caplb-demo"
	clusterName = "demo"
	lbName      = "demo-cp"
)

// stepTimeout bounds each step; the whole demo takes well under a minute once built.
const stepTimeout = 90 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tl := newTimeline(os.Stdout)
	demo := run
	if ok, why := vipDemoAvailable(); ok && os.Getenv("CAPLB_DEMO") != "static" {
		demo = runVIP
	} else {
		tl.step("running the static-backend demo (%s; CAPLB_DEMO=static chooses it as root too)", orDefault(why, "CAPLB_DEMO=static"))
	}
	if err := demo(ctx, tl); err != nil {
		tl.fail("FAIL demo: %v", err)
		stop()
		os.Exit(1)
	}
	tl.ok("demo finished: every step observed")
}

// manifest is one file of the demo's sample set.
type manifest struct {
	name string
	data []byte
}

func demoManifests() ([]manifest, error) {
	entries, err := fs.ReadDir(samples.FS, "demo")
	if err != nil {
		return nil, fmt.Errorf("reading embedded samples: %w", err)
	}
	var out []manifest
	for _, e := range entries {
		data, err := fs.ReadFile(samples.FS, path.Join("demo", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, manifest{name: path.Join("config/samples/demo", e.Name()), data: data})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	if len(out) != 3 {
		return nil, fmt.Errorf("expected 3 demo manifests (cluster, loadbalancer, machines), found %d", len(out))
	}
	return out, nil
}

// externalEndpoint reads the endpoint the demo LoadBalancer names, to serve it.
func externalEndpoint(lbManifest []byte) (lbv1.APIEndpoint, error) {
	objs, err := harness.Decode(lbManifest)
	if err != nil {
		return lbv1.APIEndpoint{}, err
	}
	for _, o := range objs {
		if o.GetKind() == "LoadBalancer" {
			host, _, _ := unstructured.NestedString(o.Object, "spec", "endpoint", "host")
			port, _, _ := unstructured.NestedInt64(o.Object, "spec", "endpoint", "port")
			if host == "" || port == 0 {
				return lbv1.APIEndpoint{}, errors.New("the demo LoadBalancer must name an explicit endpoint")
			}
			return lbv1.APIEndpoint{Host: host, Port: int32(port)}, nil
		}
	}
	return lbv1.APIEndpoint{}, errors.New("no LoadBalancer in the demo's LoadBalancer manifest")
}

func run(ctx context.Context, tl *timeline) (err error) {
	ms, err := demoManifests()
	if err != nil {
		return err
	}
	clusterYAML, lbYAML, machinesYAML := ms[0], ms[1], ms[2]
	ep, err := externalEndpoint(lbYAML.data)
	if err != nil {
		return err
	}

	tl.step("starting the test control plane (kube-apiserver + etcd) with CAPI's CRDs and caplb's")
	env, err := harness.Start(harness.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	tl.seen("control plane serving at %s", env.Config.Host)

	capi, err := env.StartCAPI(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, capi.Stop()) }()
	tl.seen("CAPI's Cluster and Machine reconcilers running (sigs.k8s.io/cluster-api/core/reconcilers), with the test infrastructure provider")
	caplb, err := env.StartCAPLB(ctx, harness.CAPLBOptions{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, caplb.Stop()) }()
	tl.seen("caplb manager running (static backend)")

	ext, err := harness.Listen(int(ep.Port), ep.Host)
	if err != nil {
		return fmt.Errorf("the demo's external load balancer needs %s:%d free: %w", ep.Host, ep.Port, err)
	}
	defer ext.Close()
	tl.step("opened the \"external load balancer\": a TCP listener on %s:%d", ep.Host, ep.Port)

	obsCtx, stopObs := context.WithCancel(ctx)
	obsDone := make(chan struct{})
	obs := newObserver(env, tl, namespace, clusterName, lbName)
	d := &demo{env: env, tl: tl, obs: obs}
	go func() { obs.run(obsCtx); close(obsDone) }()
	defer func() { stopObs(); <-obsDone }()

	tl.step("kubectl apply -f %s", clusterYAML.name)
	if err := d.apply(ctx, clusterYAML.data); err != nil {
		return err
	}
	if err := d.kubeconfig(ctx); err != nil {
		return err
	}

	for _, step := range []func(context.Context) error{
		func(ctx context.Context) error { return d.publish(ctx, lbYAML) },
		func(ctx context.Context) error { return d.members(ctx, machinesYAML) },
		d.disableRestore,
		d.deleteThroughHook,
	} {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err := step(sctx)
		cancel()
		if err != nil {
			return err
		}
	}
	tl.step("stopping caplb, CAPI's reconcilers and the control plane")
	return nil
}

// demo drives the steps.
type demo struct {
	env *harness.Env
	tl  *timeline
	obs *observer
}

// ok prints a checked outcome after the observer has printed what led to it.
func (d *demo) ok(ctx context.Context, format string, args ...any) {
	d.obs.poll(ctx)
	d.tl.ok(format, args...)
}

func (d *demo) apply(ctx context.Context, data []byte) error {
	_, err := d.env.Apply(ctx, namespace, data)
	return err
}

// kubeconfig writes what a control-plane provider would: the <cluster>-kubeconfig Secret CAPI
// uses to reach the workload cluster (here the same API server) for Nodes.
func (d *demo) kubeconfig(ctx context.Context) error {
	c := &clusterv1.Cluster{}
	if err := d.env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, c); err != nil {
		return err
	}
	if err := d.env.CreateKubeconfigSecret(ctx, c); err != nil {
		return err
	}
	d.tl.seen("Secret %s-kubeconfig written (as a control-plane provider would), so CAPI can reach the workload cluster's Nodes", clusterName)
	return nil
}

func (d *demo) publish(ctx context.Context, lb manifest) error {
	d.tl.step("kubectl apply -f %s   # no Machine exists yet", lb.name)
	if err := d.apply(ctx, lb.data); err != nil {
		return err
	}
	err := harness.Poll(ctx, stepTimeout, "the endpoint published to the Cluster", func(ctx context.Context) (bool, string, error) {
		c := &clusterv1.Cluster{}
		if err := d.env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, c); err != nil {
			return false, "", err
		}
		lb, err := d.env.GetLB(ctx, namespace, lbName)
		if err != nil {
			return false, "", err
		}
		return c.Spec.ControlPlaneEndpoint.IsValid() &&
			harness.ConditionIs(lb, lbv1.EndpointAvailableCondition, metav1.ConditionTrue), harness.DescribeLB(lb), nil
	})
	if err != nil {
		return err
	}
	list := &clusterv1.MachineList{}
	if err := d.env.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return err
	}
	if len(list.Items) != 0 {
		return fmt.Errorf("expected no Machines before the endpoint was published, found %d", len(list.Items))
	}
	d.ok(ctx, "endpoint published and probed before any Machine exists (what KubeadmControlPlane waits for)")
	return nil
}

func (d *demo) members(ctx context.Context, machines manifest) error {
	d.tl.step("kubectl apply -f %s   # three control-plane Machines", machines.name)
	if err := d.apply(ctx, machines.data); err != nil {
		return err
	}
	if _, err := d.env.WaitLB(ctx, namespace, lbName, stepTimeout, "three active members", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.ActiveTargets == 3 && harness.ConditionIs(lb, lbv1.ReadyCondition, metav1.ConditionTrue)
	}); err != nil {
		return err
	}
	// CAPI honours pre-drain hooks only on Machines with a nodeRef: wait for CAPI to report
	// every Machine Ready with its Node before going on.
	err := harness.Poll(ctx, stepTimeout, "Machines Ready with a Node, hooks on every member", func(ctx context.Context) (bool, string, error) {
		for i := range 3 {
			m, err := d.machine(ctx, i)
			if err != nil {
				return false, "", err
			}
			if _, ok := m.Annotations[lbv1.PreDrainHookAnnotation(lbName)]; !ok {
				return false, m.Name + " has no hook yet", nil
			}
			if !harness.MachineReady(m) {
				return false, m.Name + " not Ready with a nodeRef yet", nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	d.ok(ctx, "three Machines Ready with their Nodes, all active members carrying caplb's pre-drain hook; LoadBalancer Ready")
	return nil
}

func (d *demo) disableRestore(ctx context.Context) error {
	m, err := d.machine(ctx, 1)
	if err != nil {
		return err
	}
	reason := "kernel upgrade"
	d.tl.step("kubectl annotate machine %s %s=%q", m.Name, lbv1.DisabledAnnotation, reason)
	if err := d.env.Annotate(ctx, m, lbv1.DisabledAnnotation, &reason); err != nil {
		return err
	}
	if _, err := d.env.WaitLB(ctx, namespace, lbName, stepTimeout, m.Name+" disabled", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, m.Name) == lbv1.TargetDisabled && lb.Status.ActiveTargets == 2
	}); err != nil {
		return err
	}
	d.ok(ctx, "%s out of rotation (disabled), 2 members active", m.Name)

	d.tl.step("kubectl annotate machine %s %s-", m.Name, lbv1.DisabledAnnotation)
	if err := d.env.Annotate(ctx, m, lbv1.DisabledAnnotation, nil); err != nil {
		return err
	}
	if _, err := d.env.WaitLB(ctx, namespace, lbName, stepTimeout, m.Name+" restored", func(lb *lbv1.LoadBalancer) bool {
		return harness.TargetState(lb, m.Name) == lbv1.TargetActive && lb.Status.ActiveTargets == 3
	}); err != nil {
		return err
	}
	d.ok(ctx, "%s back in rotation, 3 members active", m.Name)
	return nil
}

func (d *demo) deleteThroughHook(ctx context.Context) error {
	m, err := d.machine(ctx, 0)
	if err != nil {
		return err
	}
	d.tl.step("kubectl delete machine %s   # as KubeadmControlPlane does in a rollout", m.Name)
	if err := d.env.Client.Delete(ctx, m); err != nil {
		return err
	}
	hook := lbv1.PreDrainHookAnnotation(lbName)
	err = harness.Poll(ctx, stepTimeout, "CAPI waiting on caplb's hook", func(ctx context.Context) (bool, string, error) {
		cur, err := d.machine(ctx, 0)
		if err != nil {
			return false, "", err
		}
		_, held := cur.Annotations[hook]
		waiting := cur.Status.Deletion != nil && !cur.Status.Deletion.WaitForPreDrainHookStartTime.IsZero()
		return held && waiting, fmt.Sprintf("hook held=%t, CAPI waiting=%t", held, waiting), nil
	})
	if err != nil {
		return err
	}
	d.ok(ctx, "CAPI's Machine reconciler is holding %s at its pre-drain hook while caplb quiesces it", m.Name)
	node := m.Status.NodeRef.Name
	if err := d.env.WaitGone(ctx, m, stepTimeout); err != nil {
		return err
	}
	// The last thing CAPI does before it lets a Machine go is delete its Node (after the drain
	// and the infrastructure): a Node still there would mean the hook was bypassed.
	if err := d.env.WaitGone(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, stepTimeout); err != nil {
		return err
	}
	if _, err := d.env.WaitLB(ctx, namespace, lbName, stepTimeout, "two active members", func(lb *lbv1.LoadBalancer) bool {
		return lb.Status.ActiveTargets == 2 && lb.Status.TotalTargets == 2
	}); err != nil {
		return err
	}
	d.ok(ctx, "%s quiesced and its hook released; CAPI drained it and deleted its infrastructure and Node %s; 2 members active", m.Name, node)
	return nil
}

func (d *demo) machine(ctx context.Context, i int) (*clusterv1.Machine, error) {
	m := &clusterv1.Machine{}
	err := d.env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fmt.Sprintf("demo-cp-%d", i)}, m)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("Machine demo-cp-%d not found", i)
	}
	return m, err
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
