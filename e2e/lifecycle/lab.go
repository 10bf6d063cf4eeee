//go:build linux

// Package lifecycle is the lifecycle lab: a control plane's whole life behind a VIP, with CAPI
// in the loop. A management API server runs CAPI's real Cluster and Machine reconcilers and
// caplb's manager (the real binary, a child process, under the RBAC caplb ships); a second API
// server is the workload cluster, reached through the <cluster>-kubeconfig Secret and CAPI's
// ClusterCache. The lab's infrastructure provider turns each control-plane Machine into a
// machine in a network namespace: its bootstrap files come from the Secret caplb rendered,
// resolved through the files list of the shipped KubeadmControlPlane sample and written as
// cloud-init writes them; kubeadm's part (a cluster CA, a serving certificate shaped like
// kubeadm's, the kubelet's kubeconfig and client certificate) is written beside them; the
// agent runs from the rendered static-pod manifest through the lab's kubelet (e2e/lab/podrun:
// the manifest's volumes, read-only root and capabilities, nothing more); a stand-in API
// server serves HTTPS on 6443; and the Node is registered in the workload cluster.
//
// With Options.APIServer = Real the machines run a real control plane instead (realcp.go): the
// lab plays KubeadmControlPlane's part — the cluster's CA Secrets and kubeconfig Secret once the
// endpoint is known, etcd learners added and promoted as machines join, a leaving machine's etcd
// member removed in KCP's pre-terminate hook (kcp.go) — kubeadm writes each machine's PKI,
// kubeconfigs and static-pod manifests (with the sample's apiServer.extraArgs), the lab's kubelet
// runs kubeadm's etcd and kube-apiserver beside the agent, the kubelet's credential registers the
// Node, and the workload cluster is that control plane, reached through the VIP.
//
// With Options.Bootstrap = CAPIBootstrap (the real lifecycle tests' and bench-rollout's
// default) CAPI's own kubeadm bootstrap provider renders each control-plane Machine's data from
// a KubeadmConfig made of the sample's kubeadmConfigSpec (cabpk.go), and the machine boots from
// that alone: cloud-init's jinja rendered with the machine's name and address, every file
// written with its mode (the cluster's keys, the agent's files, kubeadm's configuration), and
// kubeadm's init or join — through kubeadm's own discovery at the VIP, with the bootstrap
// token CABPK made — from the configuration CABPK wrote.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/testpki"
)

// AgentImage is the image the lab's manager renders; the lab's kubelet runs the agent binary
// for it (and for nothing else).
const AgentImage = "registry.example/caplb-agent:lifecycle"

// Options shapes a lifecycle lab.
type Options struct {
	Backend  Backend
	Binaries Binaries
	// Name is the network lab's name (1-12 characters; unique among labs running at once).
	Name string
	// APIServer is what the machines run behind the VIP (default StandIn).
	APIServer APIServer
	// Workers also runs CAPI's MachineDeployment and MachineSet reconcilers and boots the worker
	// LoadBalancer's Machines as workers (workers.go).
	Workers bool
	// KubeVIP, with a real control plane and ARP, makes the lab able to boot Machines that run
	// kube-vip instead of caplb's agent (kubevip.go).
	KubeVIP KubeVIPOptions
	// EndpointMove, with a real control plane, makes the lab one a Cluster can move to another
	// endpoint in (endpointmove.go): an external load balancer on the segment in front of the
	// machines (extlb.go), the management side routed into the segment, every serving
	// certificate carrying the load balancer's address (certSANs), kube-controller-manager's
	// bootstrap signer on every machine, and joins through kubeadm's own discovery at the
	// Cluster's endpoint of the moment.
	EndpointMove bool
	// Bootstrap, with a real control plane, is who renders the control-plane machines'
	// bootstrap data (default LabBootstrap; CAPIBootstrap: CAPI's kubeadm bootstrap provider).
	Bootstrap Bootstrap
}

// Lab is a running lifecycle lab.
type Lab struct {
	opts     Options
	net      *lab.Lab
	topo     *topology
	Mgmt     *harness.Env
	Workload *envtest.Env
	// WorkloadClient reads and writes the workload cluster as its admin.
	WorkloadClient client.Client
	capi           *harness.Running
	manager        *managerProc
	infra          *infra
	ca             *testpki.CA
	stopIPAM       context.CancelFunc
	// Namespace holds the cluster's objects; ClusterName is the sample's Cluster name.
	Namespace, ClusterName string
	vip                    netip.Addr
	// real is the lab's KubeadmControlPlane for a real control plane (nil: stand-ins).
	real    *realCP
	stopKCP context.CancelFunc
	// extLB is the endpoint-move lab's external load balancer (nil otherwise).
	extLB *extLB
}

// Start builds the lab up to a running manager; the scenario creates the cluster's objects.
func Start(ctx context.Context, opts Options) (l *Lab, err error) {
	l = &Lab{opts: opts}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
			l = nil
		}
	}()
	cluster, files, err := sampleFiles(sampleFile(opts.Backend))
	if err != nil {
		return l, err
	}
	l.ClusterName = cluster
	if l.net, err = lab.New(opts.Name); err != nil {
		return l, err
	}
	if l.topo, err = newTopology(l.net, opts.Backend); err != nil {
		return l, err
	}
	if opts.EndpointMove {
		if opts.APIServer != Real || opts.Backend != ARP {
			return l, errors.New("the endpoint-move lab needs a real control plane behind ARP")
		}
		if err := l.topo.routeFromHost(); err != nil {
			return l, err
		}
	}
	if opts.Bootstrap == CAPIBootstrap && (opts.APIServer != Real || opts.EndpointMove || opts.KubeVIP.Binary != "") {
		return l, errors.New("CAPI's kubeadm bootstrap in the lab needs a real control plane, without the endpoint move or kube-vip (not yet built for them)")
	}
	if l.ca, err = testpki.NewCA(l.net.Dir()); err != nil {
		return l, err
	}
	if l.Mgmt, err = harness.Start(harness.Options{}); err != nil {
		return l, err
	}
	deps := &nodeDeps{lab: l.net, topo: l.topo, ca: l.ca, bins: opts.Binaries, files: files, agentImage: AgentImage,
		vip: func() string { return l.vip.String() }, clusterName: cluster, scheme: l.Mgmt.Scheme}
	if opts.APIServer == Real {
		// The workload cluster is the control plane the machines run: nothing to start yet.
		if l.real, err = newRealCP(l.net.Dir(), opts.Binaries.Podrun, sampleFile(opts.Backend)); err != nil {
			return l, err
		}
		if opts.EndpointMove {
			if err := l.real.prepareEndpointMove(); err != nil {
				return l, err
			}
		}
		if opts.Bootstrap == CAPIBootstrap {
			// kubeadm's discovery (CABPK's joins) needs cluster-info signed by the bootstrap
			// signer of kube-controller-manager.
			if err := l.real.runControllerManager(); err != nil {
				return l, err
			}
			kcp, err := lab.SampleKubeadmControlPlane(sampleFile(opts.Backend))
			if err != nil {
				return l, err
			}
			deps.cabpk, deps.samplePreKubeadm = true, kcp.Spec.KubeadmConfigSpec.PreKubeadmCommands
		}
		deps.real = l.real
	} else {
		if l.Workload, err = envtest.Start(envtest.Options{}); err != nil {
			return l, fmt.Errorf("workload API server: %w", err)
		}
		if l.WorkloadClient, err = client.New(l.Workload.Config, client.Options{Scheme: l.Mgmt.Scheme}); err != nil {
			return l, err
		}
		host, err := hostPort(l.Workload.Config)
		if err != nil {
			return l, err
		}
		goaway, err := sampleGoawayChance(sampleFile(opts.Backend))
		if err != nil {
			return l, err
		}
		deps.workload = &workload{env: l.Workload, client: l.WorkloadClient, hostPort: host, goawayChance: goaway}
	}
	if l.Namespace, err = l.Mgmt.CreateNamespace(ctx, "lifecycle"); err != nil {
		return l, err
	}
	l.infra = &infra{bootstrapSecret: cluster + "-caplb-agent", nodes: map[string]*Node{}, deps: deps, cabpk: deps.cabpk}
	if opts.KubeVIP.Binary != "" {
		deps.kubeVIP = opts.KubeVIP.Binary
		l.infra.kubeVIP = l.kubeVIPRole()
		l.infra.podGC = l.collectPodsOf
	}
	if opts.EndpointMove {
		ns, err := l.topo.addExtLB()
		if err != nil {
			return l, err
		}
		if l.extLB, err = startExtLB(ns, extLBAddr, l.machineAddrs); err != nil {
			return l, err
		}
	}
	if opts.Workers {
		if l.infra.workers, err = l.workerRole(); err != nil {
			return l, err
		}
	}
	if l.capi, err = l.Mgmt.StartCAPIWith(ctx, harness.CAPIOptions{MachineDeployments: opts.Workers, KubeadmBootstrap: deps.cabpk, Infrastructure: func(mgr ctrl.Manager) error {
		l.infra.client, l.infra.apiReader = mgr.GetClient(), mgr.GetAPIReader()
		deps.mgmt = mgr.GetAPIReader()
		return l.infra.setup(mgr)
	}}); err != nil {
		return l, err
	}
	if l.real != nil {
		kctx, cancel := context.WithCancel(context.Background())
		l.stopKCP = cancel
		go l.runKCPCleanup(kctx, l.reportKCP)
	}
	if err := l.Mgmt.ApplyShippedRBAC(ctx); err != nil {
		return l, err
	}
	if l.manager, err = startManager(opts.Binaries.Manager, l.net.Dir(), l.Mgmt.Config, AgentImage); err != nil {
		return l, err
	}
	ipamCtx, cancel := context.WithCancel(context.Background())
	l.stopIPAM = cancel
	go (&ipam{client: l.Mgmt.Client, ns: l.Namespace, poolKind: "InClusterIPPool", poolName: "vips",
		first: l.topo.poolFirst(), prefix: 24, gateway: routerAddr.String()}).run(ipamCtx)
	return l, nil
}

// Dir is where the lab keeps its logs and machines' roots.
func (l *Lab) Dir() string { return l.net.Dir() }

// Close stops everything and removes the lab's namespaces.
func (l *Lab) Close() error {
	var errs []error
	if l.stopIPAM != nil {
		l.stopIPAM()
	}
	if l.stopKCP != nil {
		l.stopKCP()
	}
	l.manager.stop()
	if l.capi != nil {
		errs = append(errs, l.capi.Stop())
	}
	if l.infra != nil {
		errs = append(errs, l.infra.destroyAll())
	}
	if l.real != nil && l.real.mgmtProxy != nil {
		errs = append(errs, l.real.mgmtProxy.Close())
	}
	if l.extLB != nil {
		errs = append(errs, l.extLB.Close())
	}
	if l.net != nil {
		errs = append(errs, l.net.Close())
	}
	if l.Workload != nil {
		errs = append(errs, l.Workload.Stop())
	}
	if l.Mgmt != nil {
		errs = append(errs, l.Mgmt.Stop())
	}
	return errors.Join(errs...)
}

// LogTail returns the last lines of the lab's logs (manager, agents, API servers), for a
// failure report.
func (l *Lab) LogTail(lines int) string {
	var out string
	matches, _ := filepath.Glob(filepath.Join(l.net.Dir(), "*.log"))
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		out += "==> " + filepath.Base(m) + "\n" + tail(string(b), lines) + "\n"
	}
	return out
}

// DecisionLog is every agent's decision lines (lab.MergeAgentDecisions) in time order: a failed
// run prints them, so that a spurious claim can be explained from CI's output alone (the logs'
// tails start after it).
func (l *Lab) DecisionLog() string {
	matches, _ := filepath.Glob(filepath.Join(l.net.Dir(), "*-agent.log"))
	logs := map[string]string{}
	for _, m := range matches {
		logs[strings.TrimSuffix(filepath.Base(m), "-agent.log")] = m
	}
	return lab.MergeAgentDecisions(logs, time.Time{})
}

// SaveLogs copies every machine's and agent's log into dir (created if missing), for a run
// whose timeline needs explaining.
func (l *Lab) SaveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	matches, _ := filepath.Glob(filepath.Join(l.net.Dir(), "*.log"))
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(m)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func tail(s string, n int) string {
	count := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			count++
			if count > n {
				return s[i+1:]
			}
		}
	}
	return s
}

func hostPort(cfg *rest.Config) (string, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("workload API server address %q: %v", cfg.Host, err)
	}
	return u.Host, nil
}
