//go:build linux

package lifecycle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
	"github.com/caplb/caplb/e2e/lifecycle/observe/clients"
)

// EndpointMoveScenario moves a running cluster's API endpoint from its ARP VIP (E1, the
// LoadBalancer it was made with) to an external load balancer in front of its machines (E2: a
// static LoadBalancer with spec.endpoint.host — the "VIP to an HAProxy or a DNS name" move), as
// docs/endpoint-move.md tells a user to: the new LoadBalancer names the old one in
// spec.takeOverEndpointFrom and caplb walks the steps, with client-go on E1 (RunObserved's) and
// on E2 throughout. Then a new control-plane Machine joins through E2 with kubeadm's own
// discovery, and deleting the old LoadBalancer (and its agents) stops E1 only.
type EndpointMoveScenario struct {
	Lab            *Lab
	Recorder       Recorder
	AfterBootstrap func() error

	// Steps are the move's steps as status.endpointMove.step showed them, in order.
	Steps []string
	// Joined is the Machine that joined through E2 after the move.
	Joined string
	// CrashedAt is the step the manager was killed at (and a new one started): the first
	// writing step seen.
	CrashedAt string
	// E2 is what client-go saw through the new endpoint, from before the move to the end.
	E2 *clients.Result
	// MoveStarted is when the LoadBalancer that takes the endpoint over was created; JoinedAt
	// when the Machine that joined through E2 had joined.
	MoveStarted, JoinedAt time.Time

	life  *Scenario
	newLB string
	e2    *clients.Run
}

const (
	// moveDoneTimeout bounds the whole move (the bootstrap signer's re-signing included).
	moveDoneTimeout = 3 * time.Minute
	// e2Clients is the namespace (and so the Lease) of the clients on E2.
	e2Clients = "lifecycle-clients-e2"
)

func (s *EndpointMoveScenario) step(format string, args ...any) {
	if s.Recorder != nil {
		s.Recorder.Step(fmt.Sprintf(format, args...))
	}
}

func e2Endpoint() string { return netip.AddrPortFrom(extLBAddr, apiPort).String() }

// Run boots a two-machine control plane on E1, moves the Cluster to E2 and joins a third
// Machine through E2.
func (s *EndpointMoveScenario) Run(ctx context.Context) (Report, error) {
	var rep Report
	l := s.Lab
	s.life = &Scenario{Lab: l, Recorder: s.Recorder, AfterBootstrap: s.AfterBootstrap, Replicas: 2}
	if err := s.life.bootstrap(ctx); err != nil {
		return rep, err
	}
	e1 := l.vip
	if err := s.waitE2Serving(ctx); err != nil {
		return rep, err
	}
	var err error
	if s.e2, err = l.startClientsAt(ctx, e2Endpoint(), e2Clients); err != nil {
		return rep, fmt.Errorf("client-go on E2: %w", err)
	}
	s.step("client-go on E2 (the external load balancer, %s) beside E1 (the VIP, %s)", e2Endpoint(), e1)

	if err := s.refusedForSANs(ctx); err != nil {
		return rep, err
	}
	s.newLB = l.ClusterName + "-elb"
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: s.newLB},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName:            l.ClusterName,
			PublishClusterEndpoint: ptr(false),
			TakeOverEndpointFrom:   &lbv1.EndpointTakeOver{Name: s.life.lbName, RestartKubeProxy: true},
			Endpoint:               lbv1.APIEndpoint{Host: extLBAddr.String()},
			Backend:                lbv1.Backend{Static: &lbv1.StaticBackend{}},
		},
	}
	s.MoveStarted = time.Now()
	if err := l.Mgmt.Client.Create(ctx, lb); err != nil {
		return rep, fmt.Errorf("creating LoadBalancer %s: %w", s.newLB, err)
	}
	s.step("LoadBalancer %s created: static, endpoint.host %s, takeOverEndpointFrom %s", s.newLB, extLBAddr, s.life.lbName)
	if err := s.waitMoved(ctx); err != nil {
		return rep, err
	}
	s.step("moved to E2 through %s", strings.Join(s.Steps, ", "))
	if err := s.checkRewritten(ctx, e1); err != nil {
		return rep, err
	}
	s.step("cluster-info (re-signed by the bootstrap signer), kubeadm-config, kube-proxy, the kubeconfig Secret and the Cluster name E2")

	if s.Joined, err = s.life.addMachine(ctx); err != nil {
		return rep, fmt.Errorf("a Machine joining through E2: %w", err)
	}
	if err := s.checkJoined(e1); err != nil {
		return rep, err
	}
	s.JoinedAt = time.Now()
	s.step("%s joined through E2 with kubeadm's discovery: its admin.conf names E2, its certificate both endpoints", s.Joined)
	return rep, nil
}

// refusedForSANs starts a move to an endpoint no serving certificate carries (a host the
// members were never told about) and checks that it waits at CertSANs naming every member with
// its TLS error, rewriting nothing; removing spec.takeOverEndpointFrom aborts it (the rollback
// before any rewrite), and the LoadBalancer is deleted.
func (s *EndpointMoveScenario) refusedForSANs(ctx context.Context) error {
	l := s.Lab
	name := l.ClusterName + "-unsigned"
	lb := &lbv1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: name},
		Spec: lbv1.LoadBalancerSpec{
			ClusterName:            l.ClusterName,
			PublishClusterEndpoint: ptr(false),
			TakeOverEndpointFrom:   &lbv1.EndpointTakeOver{Name: s.life.lbName},
			Endpoint:               lbv1.APIEndpoint{Host: unsignedAddr.String()},
			Backend:                lbv1.Backend{Static: &lbv1.StaticBackend{}},
			// Nothing listens there: Ready without a probe, so that the move reaches its gate.
			HealthCheck: lbv1.HealthCheck{Disabled: true},
		},
	}
	if err := l.Mgmt.Client.Create(ctx, lb); err != nil {
		return fmt.Errorf("creating LoadBalancer %s: %w", name, err)
	}
	s.step("LoadBalancer %s created: endpoint.host %s, which no serving certificate carries", name, unsignedAddr)
	var msg string
	if err := harness.Poll(ctx, moveDoneTimeout, name+" waiting for certSANs", func(ctx context.Context) (bool, string, error) {
		cur, err := l.LB(ctx, name)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, lbv1.EndpointMoveCondition)
		if c == nil {
			return false, "no EndpointMove condition", nil
		}
		msg = c.Message
		return c.Reason == lbv1.WaitingForCertSANsReason && strings.Count(c.Message, "x509") >= len(s.life.members), c.Reason + ": " + c.Message, nil
	}); err != nil {
		return err
	}
	s.step("it waits: %s", msg)
	cur, err := l.LB(ctx, name)
	if err != nil {
		return err
	}
	orig := cur.DeepCopy()
	cur.Spec.TakeOverEndpointFrom = nil
	if err := l.Mgmt.Client.Patch(ctx, cur, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("aborting the move of %s: %w", name, err)
	}
	if err := harness.Poll(ctx, moveTimeout, name+"'s move aborted", func(ctx context.Context) (bool, string, error) {
		cur, err := l.LB(ctx, name)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, lbv1.EndpointMoveCondition)
		return c == nil && cur.Status.EndpointMove == nil, fmt.Sprintf("%+v", c), nil
	}); err != nil {
		return err
	}
	cluster := &clusterv1.Cluster{}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, cluster); err != nil {
		return err
	}
	if cluster.Spec.ControlPlaneEndpoint.Host != l.vip.String() {
		return fmt.Errorf("the aborted move changed the Cluster's endpoint to %s", cluster.Spec.ControlPlaneEndpoint.Host)
	}
	if err := l.Mgmt.Client.Delete(ctx, cur); err != nil {
		return err
	}
	s.step("spec.takeOverEndpointFrom removed: the move aborted before any rewrite; %s deleted", name)
	return l.Mgmt.WaitGone(ctx, cur, goneTimeout)
}

// waitE2Serving waits until the external load balancer forwards to a ready API server whose
// certificate verifies as E2.
func (s *EndpointMoveScenario) waitE2Serving(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.Lab.CAPEM())
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: s.Lab.DialClient,
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return harness.Poll(ctx, activeTimeout, "E2 serving", func(ctx context.Context) (bool, string, error) {
		err := getOK(ctx, hc, "https://"+e2Endpoint()+"/readyz")
		return err == nil, fmt.Sprint(err), nil
	})
}

// waitMoved follows status.endpointMove.step until the EndpointMove condition says Switched.
func (s *EndpointMoveScenario) waitMoved(ctx context.Context) error {
	return harness.Poll(ctx, moveDoneTimeout, "EndpointMove Switched", func(ctx context.Context) (bool, string, error) {
		if err := s.Lab.manager.alive(); err != nil {
			return false, "", err
		}
		lb, err := s.Lab.LB(ctx, s.newLB)
		if err != nil {
			return false, "", err
		}
		if st := lb.Status.EndpointMove; st != nil && st.Step != "" &&
			(len(s.Steps) == 0 || s.Steps[len(s.Steps)-1] != string(st.Step)) {
			s.Steps = append(s.Steps, string(st.Step))
			s.step("endpoint move: step %s", st.Step)
			if s.CrashedAt == "" && writingStep(st.Step) {
				// The step is stored, its write may or may not have happened: a new manager
				// must find out which, and write nothing twice.
				s.CrashedAt = string(st.Step)
				if err := s.Lab.crashManager(); err != nil {
					return false, "", err
				}
				s.step("manager killed at step %s; a new one started", st.Step)
			}
		}
		c := meta.FindStatusCondition(lb.Status.Conditions, lbv1.EndpointMoveCondition)
		if c == nil {
			return false, "no EndpointMove condition", nil
		}
		if c.Reason == lbv1.EndpointMoveRefusedReason {
			return false, "", fmt.Errorf("the move was refused: %s", c.Message)
		}
		return c.Status == metav1.ConditionTrue && c.Reason == lbv1.SwitchedReason, c.Reason + ": " + c.Message, nil
	})
}

// writingStep: a step that rewrites an object (not a wait, not the end).
func writingStep(s lbv1.EndpointMoveStep) bool {
	return s != lbv1.MoveStepServe && s != lbv1.MoveStepCertSANs && s != lbv1.MoveStepDone
}

// checkRewritten checks every place a kubeadm cluster keeps its endpoint, read back from the
// clusters themselves.
func (s *EndpointMoveScenario) checkRewritten(ctx context.Context, e1 netip.Addr) error {
	l := s.Lab
	var errs []error
	cluster := &clusterv1.Cluster{}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName}, cluster); err != nil {
		return err
	}
	if ep := cluster.Spec.ControlPlaneEndpoint; ep.Host != extLBAddr.String() || ep.Port != apiPort {
		errs = append(errs, fmt.Errorf("the Cluster's endpoint is %s:%d, not E2", ep.Host, ep.Port))
	}
	oldLB, err := l.LB(ctx, s.life.lbName)
	if err != nil {
		return err
	}
	if oldLB.Spec.PublishesClusterEndpoint() {
		errs = append(errs, errors.New("the old LoadBalancer still publishes"))
	}
	newLB, err := l.LB(ctx, s.newLB)
	if err != nil {
		return err
	}
	if !newLB.Spec.PublishesClusterEndpoint() || newLB.Spec.TakeOverEndpointFrom != nil {
		errs = append(errs, errors.New("the new LoadBalancer does not publish alone (publishClusterEndpoint, takeOverEndpointFrom)"))
	}
	if st := newLB.Status.EndpointMove; st == nil || !slices.Equal(sorted(st.MachinesBeforeSwitch), sorted(s.life.members)) {
		errs = append(errs, fmt.Errorf("status.endpointMove.machinesBeforeSwitch is not %v: %+v", s.life.members, st))
	}
	// restartKubeProxy: kubeadm's kube-proxy DaemonSet (its addon phase made it) names E2 in its
	// pod template, which restarts its Pods (no DaemonSet controller runs in the lab to do it).
	ds := &appsv1.DaemonSet{}
	if err := l.WorkloadClient.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, ds); err != nil {
		errs = append(errs, fmt.Errorf("kube-proxy DaemonSet: %w", err))
	} else if got := ds.Spec.Template.Annotations[lbv1.KubeProxyEndpointAnnotation]; got != e2Endpoint() {
		errs = append(errs, fmt.Errorf("kube-proxy DaemonSet's %s is %q, not E2", lbv1.KubeProxyEndpointAnnotation, got))
	}
	return errors.Join(append(errs, s.Lab.checkEndpointCopies(ctx, e1, netip.AddrPortFrom(extLBAddr, apiPort)))...)
}

// checkEndpointCopies checks, read back from both clusters, every copy of the endpoint a
// kubeadm cluster keeps: cluster-info names e2 and is signed again for the bootstrap token (a
// move drops the old signatures; kube-controller-manager's bootstrap signer signs the new
// content), kubeadm-config's controlPlaneEndpoint is e2 with e1 among its certSANs, kube-proxy's
// kubeconfig and the kubeconfig Secret name e2 (its tls-server-name too, when it has one), and a
// new connection from that Secret — what CAPI's ClusterCache makes when it reconnects — reads
// the workload cluster.
func (l *Lab) checkEndpointCopies(ctx context.Context, e1 netip.Addr, e2 netip.AddrPort) error {
	e2URL := "https://" + e2.String()
	var errs []error
	// Read through E2 with kubeadm's admin.conf (E1 may be gone: a member that left).
	cfg, err := clientcmd.RESTConfigFromKubeConfig(l.real.admin)
	if err != nil {
		return err
	}
	cfg.Host, cfg.Timeout = e2URL, 10*time.Second
	wc, err := client.New(cfg, client.Options{Scheme: l.Mgmt.Scheme})
	if err != nil {
		return err
	}
	tokenID := strings.Split(l.real.cluster.BootstrapToken, ".")[0]
	ci := &corev1.ConfigMap{}
	if err := harness.Poll(ctx, time.Minute, "cluster-info signed again", func(ctx context.Context) (bool, string, error) {
		if err := wc.Get(ctx, client.ObjectKey{Namespace: "kube-public", Name: "cluster-info"}, ci); err != nil {
			return false, "", err
		}
		_, signed := ci.Data["jws-kubeconfig-"+tokenID]
		return signed, fmt.Sprintf("keys %v", keys(ci.Data)), nil
	}); err != nil {
		errs = append(errs, err)
	}
	if srv := kubeconfigServer(ci.Data["kubeconfig"]); srv != e2URL {
		errs = append(errs, fmt.Errorf("cluster-info names %q", srv))
	}
	kc := &corev1.ConfigMap{}
	if err := wc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, kc); err != nil {
		return err
	}
	var cc struct {
		ControlPlaneEndpoint string `json:"controlPlaneEndpoint"`
		APIServer            struct {
			CertSANs []string `json:"certSANs"`
		} `json:"apiServer"`
	}
	if err := yaml.Unmarshal([]byte(kc.Data["ClusterConfiguration"]), &cc); err != nil {
		return fmt.Errorf("kubeadm-config: %w", err)
	}
	if cc.ControlPlaneEndpoint != e2.String() || !slices.Contains(cc.APIServer.CertSANs, e1.String()) {
		errs = append(errs, fmt.Errorf("kubeadm-config: controlPlaneEndpoint %q, certSANs %v (want E2, and E1 among the SANs)",
			cc.ControlPlaneEndpoint, cc.APIServer.CertSANs))
	}
	kp := &corev1.ConfigMap{}
	if err := wc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, kp); err != nil {
		return err
	}
	if srv := kubeconfigServer(kp.Data["kubeconfig.conf"]); srv != e2URL {
		errs = append(errs, fmt.Errorf("kube-proxy's kubeconfig.conf names %q", srv))
	}
	// The kubeconfig Secret: E2, and a new connection from it (what CAPI's ClusterCache makes
	// when it reconnects) reads the workload cluster through E2.
	sec := &corev1.Secret{}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.ClusterName + "-kubeconfig"}, sec); err != nil {
		return err
	}
	if srv := kubeconfigServer(string(sec.Data["value"])); srv != e2URL {
		errs = append(errs, fmt.Errorf("the %s-kubeconfig Secret names %q", l.ClusterName, srv))
	} else if name := kubeconfigTLSName(string(sec.Data["value"])); name != "" && name != e2.Addr().String() {
		// The lab's Secret verifies the server by name (tls-server-name): it must follow.
		errs = append(errs, fmt.Errorf("the %s-kubeconfig Secret verifies E2 as %q", l.ClusterName, name))
	} else if cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"]); err != nil {
		errs = append(errs, err)
	} else {
		cfg.Timeout = 10 * time.Second
		cs, err := kubernetes.NewForConfig(cfg)
		if err == nil {
			_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("a new connection from the rewritten kubeconfig Secret: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkJoined checks the Machine that joined after the move: kubeadm made its files from what
// it discovered through E2.
func (s *EndpointMoveScenario) checkJoined(e1 netip.Addr) error {
	n := s.Lab.Node(s.Joined)
	if n == nil || n.cp == nil {
		return fmt.Errorf("machine %s is not running", s.Joined)
	}
	var errs []error
	if srv, err := kubeadm.ServerOf(n.cp.Machine, kubeadm.AdminConfPath); err != nil || srv != "https://"+e2Endpoint() {
		errs = append(errs, fmt.Errorf("%s's admin.conf names %q (%v), not E2", s.Joined, srv, err))
	}
	b, err := os.ReadFile(n.cp.Path(filepath.Join(kubeadm.PKIDir, "apiserver.crt")))
	if err != nil {
		return err
	}
	crt, err := parseCertPEM(b)
	if err != nil {
		return err
	}
	var ips []string
	for _, ip := range crt.IPAddresses {
		ips = append(ips, ip.String())
	}
	for _, want := range []string{e1.String(), extLBAddr.String()} {
		if !slices.Contains(ips, want) {
			errs = append(errs, fmt.Errorf("%s's serving certificate lacks %s (it has %v)", s.Joined, want, ips))
		}
	}
	return errors.Join(errs...)
}

// Teardown deletes the old LoadBalancer and removes its agents (the life's teardown: nothing of
// it left, no machine holding E1), then checks that E2 still serves and stops its clients.
func (s *EndpointMoveScenario) Teardown(ctx context.Context) error {
	s.step("delete the old LoadBalancer %s: E1 stops, E2 serves", s.life.lbName)
	err := s.life.Teardown(ctx)
	if err == nil {
		err = s.waitE2Serving(ctx)
	}
	s.StopE2()
	return err
}

// StopE2 stops the clients on E2 (once) and keeps their result.
func (s *EndpointMoveScenario) StopE2() {
	if s.e2 != nil {
		res := s.e2.Stop(30 * time.Second)
		s.E2, s.e2 = &res, nil
	}
}

// RunEndpointMoveObserved runs the move with RunObserved's clients and samplers on E1; the
// scenario's record (its steps, client-go on E2) comes back with it.
func RunEndpointMoveObserved(ctx context.Context, l *Lab, log func(string)) (Observed, *EndpointMoveScenario, error) {
	var s *EndpointMoveScenario
	obs, err := runObserved(ctx, l, log, func(rec Recorder, afterBootstrap func() error) lifeRunner {
		s = &EndpointMoveScenario{Lab: l, Recorder: rec, AfterBootstrap: afterBootstrap}
		return s
	})
	if s != nil {
		s.StopE2()
	}
	return obs, s, err
}

// kubeconfigServer is the server a kubeconfig's first cluster names ("" if none).
func kubeconfigServer(kc string) string {
	cfg, err := clientcmd.Load([]byte(kc))
	if err != nil {
		return ""
	}
	for _, c := range cfg.Clusters {
		return c.Server
	}
	return ""
}

// kubeconfigTLSName is the tls-server-name of a kubeconfig's first cluster ("" if none).
func kubeconfigTLSName(kc string) string {
	cfg, err := clientcmd.Load([]byte(kc))
	if err != nil {
		return ""
	}
	for _, c := range cfg.Clusters {
		return c.TLSServerName
	}
	return ""
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
