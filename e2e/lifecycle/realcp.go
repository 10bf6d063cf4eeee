//go:build linux

package lifecycle

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// APIServer is what runs on the lab's machines behind the VIP.
type APIServer string

const (
	// StandIn is the lab's stand-in API server (e2e/lab/standin): fast, no etcd; the workload
	// cluster is a separate test API server.
	StandIn APIServer = "standin"
	// Real is a control plane made by real kubeadm: etcd and kube-apiserver from kubeadm's
	// manifests on every machine, one etcd cluster, and the workload cluster is that control
	// plane itself, reached through the VIP.
	Real APIServer = "real"
)

// APIServerFromEnv reads CAPLB_LAB_APISERVER ("standin" or "real"; empty: def).
func APIServerFromEnv(def APIServer) (APIServer, error) {
	switch v := APIServer(os.Getenv("CAPLB_LAB_APISERVER")); v {
	case "":
		return def, nil
	case StandIn, Real:
		return v, nil
	default:
		return "", fmt.Errorf("CAPLB_LAB_APISERVER=%q: use %q or %q", v, StandIn, Real)
	}
}

// kcpCleanupHook is KubeadmControlPlane's pre-terminate hook: KCP removes a deleted Machine's
// etcd member while the Machine controller waits on it, after drain and before the machine goes.
const kcpCleanupHook = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/kcp-cleanup"

// realCP is the lab's part of KubeadmControlPlane for a real control plane: the cluster's shared
// keys (its CA Secrets), the kubeconfig Secret, etcd membership as machines join and leave.
type realCP struct {
	cluster kubeadm.Cluster
	bins    kubeadm.Binaries
	scratch string
	shared  map[string][]byte
	// mgmtProxy carries the management side (CAPI's ClusterCache, the manager) to the VIP.
	mgmtProxy *lab.APIProxy
	// admin is kubeadm's admin.conf of the first machine (server: the endpoint).
	admin []byte
	// peers names the machines by etcd peer URL from before their learner is added (etcd lists
	// a learner that has not started without a name; the timeline names it after its machine).
	peersMu sync.Mutex
	peers   map[string]string
	// discovery: joins go through kubeadm's own discovery at the Cluster's endpoint of the
	// moment, as CAPI's kubeadm bootstrap writes it (the endpoint-move lab).
	discovery bool
}

// prepareEndpointMove shapes the control plane for the endpoint-move lab: the external load
// balancer's address in every serving certificate (the user planned the move, or KCP rolled for
// it), kube-controller-manager's bootstrap signer on every machine, discovery joins.
func (r *realCP) prepareEndpointMove() error {
	if err := r.runControllerManager(); err != nil {
		return err
	}
	// The external load balancer's address and the first VIP of the pool: both endpoints a
	// cluster of this lab moves to are in every certificate, as a user planning the move puts
	// them in KubeadmControlPlane's certSANs.
	r.cluster.CertSANs = []string{extLBAddr.String(), arpPoolFirst.String()}
	r.discovery = true
	return nil
}

// runControllerManager runs kube-controller-manager on every machine, kept to the controllers
// kubeadm's joins need: the bootstrap signer signs cluster-info for each bootstrap token (what
// kubeadm's discovery verifies), the token cleaner removes expired tokens.
func (r *realCP) runControllerManager() error {
	bin, err := envtest.BinaryDir()
	if err != nil {
		return err
	}
	r.bins.ControllerManager = filepath.Join(bin, "kube-controller-manager")
	if _, err := os.Stat(r.bins.ControllerManager); err != nil {
		return fmt.Errorf("kubeadm's discovery in the lab needs kube-controller-manager in %s: run `make testbin` (%w)", bin, err)
	}
	r.cluster.ControllerManagerArgs = []kubeadm.Arg{{Name: "controllers", Value: labControllerManagerFlags}}
	return nil
}

// notePeer remembers m's name for its etcd peer URL.
func (r *realCP) notePeer(m kubeadm.Machine) {
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	if r.peers == nil {
		r.peers = map[string]string{}
	}
	r.peers[m.PeerURL()] = m.Name
}

// peerName is the name of the machine whose etcd peer URL is url ("" if none).
func (r *realCP) peerName(url string) string {
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	return r.peers[url]
}

func newRealCP(dir, podrun, sample string) (*realCP, error) {
	bin, err := envtest.BinaryDir()
	if err != nil {
		return nil, err
	}
	args, err := kubeadm.SampleAPIServerArgs(sample)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(bin, "kubeadm")); err != nil {
		return nil, fmt.Errorf("the real control plane needs kubeadm in %s: run `make testbin` (%w)", bin, err)
	}
	token, err := kubeadm.NewBootstrapToken()
	if err != nil {
		return nil, err
	}
	return &realCP{
		cluster: kubeadm.Cluster{Kubeadm: filepath.Join(bin, "kubeadm"), KubernetesVersion: envtest.K8sVersion, APIServerArgs: args,
			BootstrapToken: token},
		bins: kubeadm.Binaries{Podrun: podrun, Etcd: filepath.Join(bin, "etcd"),
			APIServer: filepath.Join(bin, "kube-apiserver")},
		scratch: filepath.Join(dir, "pods"),
	}, nil
}

// caSecrets maps the cluster's CA Secrets (KCP's names and keys) to kubeadm's files.
var caSecrets = []struct{ suffix, crt, key string }{
	{"ca", "ca.crt", "ca.key"},
	{"etcd", "etcd/ca.crt", "etcd/ca.key"},
	{"proxy", "front-proxy-ca.crt", "front-proxy-ca.key"},
	{"sa", "sa.pub", "sa.key"},
}

// setUp runs once the endpoint is known, before any Machine: KCP's keys and kubeconfig. The
// management side reaches the endpoint through a proxy dialling from the client's namespace,
// so the kubeconfig names the proxy and verifies the server as the endpoint's address.
func (l *Lab) setUpRealCP(ctx context.Context) error {
	r := l.real
	r.cluster.Name, r.cluster.Endpoint = l.ClusterName, l.vip
	shared, err := r.cluster.NewSharedKeys(ctx, filepath.Join(l.net.Dir(), "keys"), l.topo.client)
	if err != nil {
		return fmt.Errorf("the cluster's keys: %w", err)
	}
	r.shared = shared
	endpoint := netip.AddrPortFrom(l.vip, apiPort).String()
	server := "https://" + endpoint
	if !l.opts.EndpointMove {
		// The management side has no route into the lab (the endpoint-move lab's has one).
		if r.mgmtProxy, err = lab.ProxyOut(l.topo.client, "127.0.0.1:0", endpoint); err != nil {
			return err
		}
		server = "https://" + r.mgmtProxy.Addr()
	}
	caCert, caKey, err := parseCA(shared["ca.crt"], shared["ca.key"])
	if err != nil {
		return err
	}
	kc, err := kubeconfig.New(l.ClusterName, server, caCert, caKey)
	if err != nil {
		return err
	}
	for _, c := range kc.Clusters {
		c.TLSServerName = l.vip.String()
	}
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.ClusterName}}
	if err := l.Mgmt.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		return err
	}
	if err := l.Mgmt.Client.Create(ctx, kubeconfig.GenerateSecret(cluster, b)); err != nil {
		return fmt.Errorf("the workload kubeconfig Secret: %w", err)
	}
	// The CA Secrets after the kubeconfig: CAPI's Cluster controller writes a kubeconfig itself
	// for a Cluster without a control plane object as soon as <cluster>-ca exists, and the
	// management side must use this one (it goes through the lab's proxy).
	for _, s := range caSecrets {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.ClusterName + "-" + s.suffix,
			Labels: map[string]string{clusterv1.ClusterNameLabel: l.ClusterName}},
			Type: clusterv1.ClusterSecretType,
			Data: map[string][]byte{"tls.crt": shared[s.crt], "tls.key": shared[s.key]}}
		if err := l.Mgmt.Client.Create(ctx, sec); err != nil {
			return fmt.Errorf("CA Secret %s: %w", sec.Name, err)
		}
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	l.WorkloadClient, err = client.New(cfg, client.Options{Scheme: l.Mgmt.Scheme})
	return err
}

func parseCA(crtPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	b, _ := pem.Decode(crtPEM)
	if b == nil {
		return nil, nil, errors.New("cluster CA: no PEM certificate")
	}
	crt, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, _ := pem.Decode(keyPEM)
	if k == nil {
		return nil, nil, errors.New("cluster CA: no PEM key")
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(k.Bytes); err != nil {
		if key, err = x509.ParsePKCS1PrivateKey(k.Bytes); err != nil {
			if key, err = x509.ParseECPrivateKey(k.Bytes); err != nil {
				return nil, nil, fmt.Errorf("cluster CA key: %w", err)
			}
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("cluster CA key cannot sign")
	}
	return crt, signer, nil
}

// sharedFromSecrets reads the cluster's keys from its CA Secrets, as KCP's bootstrap puts them
// in a new machine's write_files.
func (d *nodeDeps) sharedFromSecrets(ctx context.Context, namespace string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, s := range caSecrets {
		sec := &corev1.Secret{}
		if err := d.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: d.clusterName + "-" + s.suffix}, sec); err != nil {
			return nil, fmt.Errorf("CA Secret %s-%s: %w", d.clusterName, s.suffix, err)
		}
		out[s.crt], out[s.key] = sec.Data["tls.crt"], sec.Data["tls.key"]
	}
	return out, nil
}

// cpMachine is what a real control-plane machine runs besides the agent.
type cpMachine struct {
	kubeadm.Machine
	etcd, apiserver, controllerManager *lab.Process
	// stopKubelet ends the kubelet's API and reports (kubelet.go).
	stopKubelet func()
}

// bootRealCP makes n a control-plane machine with kubeadm, as `kubeadm init` (the first) or
// `kubeadm join --control-plane` (the others) would, and registers its Node as its kubelet.
func (d *nodeDeps) bootRealCP(ctx context.Context, n *Node, namespace string, others []*Node) error {
	r := d.real
	// Each step's time goes to the lab's boot.log: where a slow boot went.
	began, last := time.Now(), time.Now()
	step := func(what string) {
		d.lab.Logf("boot", "%s: %s %v", n.Name, what, time.Since(last).Round(time.Millisecond))
		last = time.Now()
	}
	defer func() { d.lab.Logf("boot", "%s: booted in %v", n.Name, time.Since(began).Round(time.Millisecond)) }()
	shared, err := d.sharedFromSecrets(ctx, namespace)
	if err != nil {
		return err
	}
	n.cp = &cpMachine{Machine: kubeadm.Machine{Name: n.Name, Addr: n.Addr, Root: n.Root}}
	r.notePeer(n.cp.Machine)
	var via *Node
	for _, o := range others {
		if o.cp != nil && o.cp.apiserver != nil {
			via = o
			break
		}
	}
	var learner uint64
	var etcd *kubeadm.Etcd
	boot := n.kubeadmStep
	if boot != nil && boot.Join != (via != nil) {
		return fmt.Errorf("%s: CABPK rendered `kubeadm %s` for a machine that %s", n.Name, map[bool]string{true: "join", false: "init"}[boot.Join],
			map[bool]string{true: "joins a running control plane", false: "is the first"}[via != nil])
	}
	if via == nil {
		init := func() error { return r.cluster.InitWithKeys(ctx, n.cp.Machine, n.NS, shared) }
		if boot != nil {
			init = func() error { return r.cluster.InitWritten(ctx, n.cp.Machine, n.NS) }
		}
		if err := init(); err != nil {
			return err
		}
		step("kubeadm init")
	} else {
		if etcd, err = kubeadm.NewEtcd(via.cp.Machine, via.NS.DialContext, via.cp.ClientURL()); err != nil {
			return err
		}
		defer etcd.Close()
		id, initial, err := etcd.AddLearner(ctx, n.cp.Machine)
		if err != nil {
			return fmt.Errorf("adding %s's etcd member as a learner: %w", n.Name, err)
		}
		learner = id
		step("etcd learner added")
		if boot != nil {
			if err := r.cluster.JoinWritten(ctx, n.cp.Machine, n.NS, initial); err != nil {
				return err
			}
		} else if r.discovery {
			if err := d.joinDiscovered(ctx, n, namespace, shared, initial); err != nil {
				return err
			}
		} else if err := r.cluster.Join(ctx, n.cp.Machine, n.NS, shared, initial); err != nil {
			return err
		}
		step("kubeadm join")
	}
	if boot != nil {
		if err := n.bootstrapSucceeded(); err != nil {
			return err
		}
	}
	// The kubelet starts every static pod once kubeadm wrote its kubeconfig: the agent's, or
	// kube-vip's (the bootstrap wrote it), beside kubeadm's.
	start := n.startAgent
	if n.runsKubeVIP {
		start = n.startKubeVIP
	}
	if err := start(); err != nil {
		return err
	}
	if err := n.startControlPlane(); err != nil {
		return err
	}
	step("agent, etcd and kube-apiserver started")
	if etcd != nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := etcd.Promote(pctx, learner)
		cancel()
		if err != nil {
			return fmt.Errorf("promoting %s's etcd learner: %w", n.Name, err)
		}
		step("etcd learner promoted")
	}
	if err := n.waitAPIReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	step("kube-apiserver ready")
	if via == nil {
		if err := r.cluster.UploadConfig(ctx, n.cp.Machine, n.NS); err != nil {
			return err
		}
		if r.admin, err = os.ReadFile(n.cp.Path(kubeadm.AdminConfPath)); err != nil {
			return err
		}
	}
	if err := n.registerAsKubelet(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(); err != nil {
		return err
	}
	step("Node registered, kubelet API and reports started")
	if n.runsKubeVIP {
		if err := n.createMirrorPod(ctx); err != nil {
			return err
		}
		step("kube-vip's mirror Pod created")
	}
	err = r.cluster.MarkControlPlane(ctx, n.cp.Machine, n.NS)
	step("marked control plane")
	return err
}

// startControlPlane runs kubeadm's etcd and kube-apiserver manifests through the lab's kubelet,
// and kube-controller-manager's where the lab has it.
func (n *Node) startControlPlane() (err error) {
	k := kubeadm.Kubelet{NS: n.NS, Machine: n.cp.Machine, Bins: n.deps.real.bins, Scratch: n.deps.real.scratch}
	if n.cp.etcd == nil {
		if n.cp.etcd, err = k.Start(kubeadm.EtcdManifest); err != nil {
			return err
		}
	}
	if n.cp.apiserver, err = k.Start(kubeadm.APIManifest); err != nil {
		return err
	}
	if k.Bins.ControllerManager != "" && n.cp.controllerManager == nil {
		n.cp.controllerManager, err = k.Start(kubeadm.ControllerManagerManifest)
	}
	return err
}

// joinDiscovered makes n's files with kubeadm's own join, discovering the cluster at the
// Cluster's controlPlaneEndpoint as CAPI's kubeadm bootstrap writes it into the
// JoinConfiguration: after an endpoint move, the new endpoint.
func (d *nodeDeps) joinDiscovered(ctx context.Context, n *Node, namespace string, shared map[string][]byte, members []kubeadm.EtcdMember) error {
	cluster := &clusterv1.Cluster{}
	if err := d.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: d.clusterName}, cluster); err != nil {
		return err
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	host, err := netip.ParseAddr(ep.Host)
	if err != nil {
		return fmt.Errorf("the Cluster's endpoint %q: %w", ep.Host, err)
	}
	hash, err := kubeadm.CACertHash(shared["ca.crt"])
	if err != nil {
		return err
	}
	c := d.real.cluster
	c.Endpoint = host
	disc := kubeadm.Discovery{Endpoint: netip.AddrPortFrom(host, uint16(ep.Port)).String(), Token: c.BootstrapToken, CACertHash: hash}
	d.lab.Logf("boot", "%s: kubeadm join discovers the cluster at %s", n.Name, disc.Endpoint)
	return c.JoinDiscovered(ctx, n.cp.Machine, n.NS, shared, members, disc)
}
