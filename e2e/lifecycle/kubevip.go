//go:build linux

package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/kubeadm"
)

// The kube-vip takeover lab: a cluster whose control plane runs real kube-vip as a static pod,
// as CAPV's templates make it (KubeadmControlPlane files; ARP, Lease election on
// kube-system/plndr-cp-lock, 15 s lease, 10 s renew deadline, 2 s retry) or announcing by BGP
// to the lab's router (KubeVIPBGP), moved onto caplb by a rollout whose new Machines boot with
// caplb's files instead (TakeOverScenario).

// kubeVIPSecretKey is the key of kube-vip's manifest in the cluster's kube-vip bootstrap Secret.
const kubeVIPSecretKey = "kube-vip.yaml"

// kubeVIPLeaseName is kube-vip's control-plane election Lease (its default, CAPV's).
const kubeVIPLeaseName = "plndr-cp-lock"

// kubeVIPImageRepo is kube-vip's image; the lab's kubelet runs the binary built for its tag.
const kubeVIPImageRepo = "ghcr.io/kube-vip/kube-vip"

// kubeVIPManifestTemplate is CAPV's kube-vip static pod (its cluster templates' files entry):
// the control-plane VIP by ARP with Lease election and the Service VIPs on (svc_enable), the
// admin kubeconfig mounted, and "kubernetes" aliased to the node itself so that kube-vip reaches
// its local API server before any VIP exists.
var kubeVIPManifestTemplate = template.Must(template.New("kube-vip").Parse(`apiVersion: v1
kind: Pod
metadata:
  name: kube-vip
  namespace: kube-system
spec:
  containers:
  - args:
    - manager
    env:
    - name: cp_enable
      value: "true"
    - name: vip_interface
      value: {{ .Interface }}
    - name: address
      value: {{ .VIP }}
    - name: port
      value: "6443"
    - name: vip_arp
      value: "{{ not .BGP }}"
{{- with .BGP }}
    - name: bgp_enable
      value: "true"
    - name: bgp_routerinterface
      value: eth0
    - name: bgp_as
      value: "{{ .ASN }}"
    - name: bgp_peers
      value: {{ .Peers }}
{{- end }}
    - name: vip_leaderelection
      value: "{{ .Elect }}"
    - name: vip_leaseduration
      value: "15"
    - name: vip_renewdeadline
      value: "10"
    - name: vip_retryperiod
      value: "2"
    - name: svc_enable
      value: "true"
    - name: svc_leasename
      value: plndr-svcs-lock
    - name: prometheus_server
      value: :2112
{{- if .KubernetesAddr }}
    - name: kubernetes_addr
      value: {{ .KubernetesAddr }}
{{- end }}
    image: {{ .Image }}
    imagePullPolicy: IfNotPresent
    name: kube-vip
    resources: {}
    securityContext:
      capabilities:
        add:
        - NET_ADMIN
        - NET_RAW
    volumeMounts:
    - mountPath: /etc/kubernetes/admin.conf
      name: kubeconfig
  hostAliases:
  - hostnames:
    - kubernetes
    - localhost
    ip: 127.0.0.1
  hostNetwork: true
  volumes:
  - hostPath:
      path: /etc/kubernetes/admin.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
`))

// KubeVIPBGP makes kube-vip's manifest announce the VIP by BGP (bgp_enable, the VIP on lo,
// vip_arp off) to Peers, kube-vip's bgp_peers (<address>:<AS>:<password>, comma-separated), as
// AS ASN with the node's eth0 address as its router ID: the shape of kube-vip's BGP docs.
type KubeVIPBGP struct {
	ASN   uint32
	Peers string
	// NoElection: every kube-vip node announces (vip_leaderelection false), the overlap case
	// nothing fences; otherwise only the Lease's leader does.
	NoElection bool
}

// KubeVIPManifest is kube-vip's static pod for vip, at the given release: ARP with Lease election
// (CAPV's), or BGP when bgp is set. From v1 on kube-vip reaches the API server at its
// kubeconfig's server (admin.conf: the VIP, which nobody holds on a new cluster's first machine)
// unless kubernetes_addr names another: the manifest sets it to the node itself, as the
// hostAlias did for v0.x (found by this lab with v1.2.2: without it kube-vip never took its
// Lease).
func KubeVIPManifest(version string, vip netip.Addr, bgp *KubeVIPBGP) ([]byte, error) {
	var b bytes.Buffer
	data := struct {
		VIP, Image, KubernetesAddr, Interface string
		Elect                                 bool
		BGP                                   *KubeVIPBGP
	}{VIP: vip.String(), Image: kubeVIPImageRepo + ":" + version, Interface: "eth0", Elect: true, BGP: bgp}
	if bgp != nil {
		data.Interface, data.Elect = "lo", !bgp.NoElection
	}
	if !strings.HasPrefix(version, "v0.") {
		data.KubernetesAddr = fmt.Sprintf("kubernetes:%d", apiPort)
	}
	err := kubeVIPManifestTemplate.Execute(&b, data)
	return b.Bytes(), err
}

// kubeVIPSecret names the cluster's bootstrap Secret for kube-vip machines.
func (l *Lab) kubeVIPSecret() string { return l.ClusterName + "-kube-vip" }

// kubeVIPRole boots the Machines whose bootstrap is the kube-vip Secret: kubeadm's files and
// kube-vip's static pod, no caplb agent.
func (l *Lab) kubeVIPRole() *bootRole {
	return &bootRole{kubeVIP: true, secret: l.kubeVIPSecret(), files: []bootFile{{
		Path: kubeadm.KubeVIPManifest, Owner: "root:root", Permissions: 0o644,
		SecretName: l.kubeVIPSecret(), SecretKey: kubeVIPSecretKey}}}
}

// CreateKubeVIPCluster creates the Cluster as a kube-vip cluster has it: its controlPlaneEndpoint
// set by the user to the VIP kube-vip serves (the first address of the lab's pool), the cluster's
// keys and kubeconfig as KCP makes them, and the bootstrap Secret with kube-vip's manifest. No
// LoadBalancer yet.
func (l *Lab) CreateKubeVIPCluster(ctx context.Context) (netip.Addr, error) {
	if l.real == nil || l.opts.KubeVIP.Binary == "" {
		return netip.Addr{}, fmt.Errorf("a kube-vip cluster needs a real control plane and Options.KubeVIP")
	}
	vip := l.topo.poolFirst()
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.ClusterName},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: vip.String(), Port: apiPort},
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}}}},
	}
	if err := l.Mgmt.Client.Create(ctx, c); err != nil {
		return vip, fmt.Errorf("creating Cluster: %w", err)
	}
	var bgp *KubeVIPBGP
	if l.opts.Backend == BGP {
		// kube-vip peers with the lab's router as caplb's agents do: the node AS, the router's
		// listen range, its TCP-MD5 password.
		bgp = &KubeVIPBGP{ASN: nodeASN, Peers: fmt.Sprintf("%s:%d:%s", routerAddr, routerASN, bgpPassword),
			NoElection: l.opts.KubeVIP.NoElection}
	}
	manifest, err := KubeVIPManifest(l.opts.KubeVIP.Version, vip, bgp)
	if err != nil {
		return vip, err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.kubeVIPSecret(),
		Labels: map[string]string{clusterv1.ClusterNameLabel: l.ClusterName}},
		Type: clusterv1.ClusterSecretType, Data: map[string][]byte{kubeVIPSecretKey: manifest}}
	if err := l.Mgmt.Client.Create(ctx, sec); err != nil {
		return vip, fmt.Errorf("creating the kube-vip bootstrap Secret: %w", err)
	}
	got, err := l.WaitEndpoint(ctx, endpointTimeout)
	if err == nil && got != vip {
		err = fmt.Errorf("the Cluster's endpoint is %s, not kube-vip's %s", got, vip)
	}
	return vip, err
}

// CreateKubeVIPMachine creates a control-plane Machine that boots with kube-vip's files, as the
// cluster's KubeadmControlPlane did before the takeover.
func (l *Lab) CreateKubeVIPMachine(ctx context.Context, name string) (*clusterv1.Machine, error) {
	return l.createMachine(ctx, name, l.kubeVIPSecret())
}

// CreateTakeOverLB creates the LoadBalancer that takes the VIP over from kube-vip: the backend's
// sample's, its endpoint the Cluster's (kube-vip's VIP), spec.backend.<arp|bgp>.takeOver.kubeVIP
// with kube-vip's Lease and its Service VIPs acknowledged (the lab has no Service of type
// LoadBalancer). Unguarded leaves takeOver out: the swap CAPV's migration describes, a control.
// leaseName, when set, names another Lease than kube-vip's (a refusal to show).
func (l *Lab) CreateTakeOverLB(ctx context.Context, unguarded bool, leaseName string) (*lbv1.LoadBalancer, error) {
	lb, secrets, err := lab.SampleObjects(sampleFile(l.opts.Backend), l.Namespace)
	if err != nil {
		return nil, err
	}
	drain := lbv1.Duration{Duration: labDrainPeriod}
	lb.Spec.Quiesce.DrainPeriod = &drain
	lb.Spec.Endpoint = lbv1.APIEndpoint{Host: l.vip.String(), Port: apiPort}
	if leaseName == "" {
		leaseName = kubeVIPLeaseName
	}
	var takeOver *lbv1.TakeOver
	if !unguarded {
		takeOver = &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{
			LeaseNamespace: "kube-system", LeaseName: leaseName, AcknowledgeServiceVIPs: true}}
	}
	if b := lb.Spec.Backend.BGP; b != nil {
		// The lab's one router, as CreateCluster has it; kube-vip announces to the same.
		b.AddressFrom, b.TakeOver = nil, takeOver
		b.Peers = b.Peers[:1]
		b.Peers[0].Address = routerAddr.String()
		b.Peers[0].ASN = routerASN
		b.ASN = nodeASN
	} else {
		lb.Spec.Backend.ARP.AddressFrom, lb.Spec.Backend.ARP.TakeOver = nil, takeOver
	}
	for _, s := range secrets {
		if err := l.Mgmt.Client.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	if err := l.Mgmt.Client.Create(ctx, lb); err != nil {
		return nil, fmt.Errorf("creating LoadBalancer: %w", err)
	}
	return lb, nil
}

// kubeVIPRestartBackoff is the kubelet's first crash-loop back-off; it doubles up to
// kubeVIPRestartBackoffMax.
const (
	kubeVIPRestartBackoff    = 10 * time.Second
	kubeVIPRestartBackoffMax = 5 * time.Minute
)

// startKubeVIP runs kube-vip's static pod as the kubelet does, restarting it when it exits
// (restartPolicy Always, with the kubelet's back-off): kube-vip v0.9 exits on losing its Lease
// and relies on that restart. It stops when the machine is destroyed.
func (n *Node) startKubeVIP() error {
	k := kubeadm.Kubelet{NS: n.NS, Machine: n.cp.Machine, Bins: n.deps.real.bins, Scratch: n.deps.real.scratch}
	k.Bins.KubeVIP = n.deps.kubeVIP
	p, err := k.Start(kubeadm.KubeVIPManifest)
	if err != nil {
		return err
	}
	n.stopKubeVIP = make(chan struct{})
	n.kubeVIPDone = make(chan struct{})
	go func() {
		defer close(n.kubeVIPDone)
		backoff := kubeVIPRestartBackoff
		for {
			select {
			case <-n.stopKubeVIP:
				_ = p.Stop(30 * time.Second)
				return
			case <-p.Done():
			}
			_, werr := p.Exited()
			n.deps.lab.Logf("kubelet", "%s: kube-vip exited (%v); restarting in %v", n.Name, werr, backoff)
			select {
			case <-n.stopKubeVIP:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, kubeVIPRestartBackoffMax)
			if p, err = k.Start(kubeadm.KubeVIPManifest); err != nil {
				n.deps.lab.Logf("kubelet", "%s: restarting kube-vip: %v", n.Name, err)
				return
			}
		}
	}()
	return nil
}

// stopKubeVIPPod stops kube-vip (SIGTERM, the kubelet's 30 s grace) and its restarts.
func (n *Node) stopKubeVIPPod() {
	if n.stopKubeVIP == nil {
		return
	}
	close(n.stopKubeVIP)
	<-n.kubeVIPDone
	n.stopKubeVIP = nil
}

// createMirrorPod creates the kubelet's mirror Pod of the machine's kube-vip static pod with the
// node's own credential (kubelet.conf, under the Node authorizer and NodeRestriction): what the
// manager's takeover check reads. Its annotations and owner are the kubelet's.
func (n *Node) createMirrorPod(ctx context.Context) error {
	c, err := n.kubeletClient()
	if err != nil {
		return err
	}
	pod, err := kubeadm.ReadStaticPod(n.cp.Path(kubeadm.KubeVIPManifest))
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
		return fmt.Errorf("%s: reading its Node for the mirror Pod's owner: %w", n.Name, err)
	}
	mirror := kubeadm.MirrorOf(pod, node)
	var last error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if last = c.Create(ctx, mirror); last == nil || apierrors.IsAlreadyExists(last) {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s: creating the mirror Pod of kube-vip: %w", n.Name, last)
}

// KubeVIPOptions is the Options.KubeVIP of a takeover lab.
type KubeVIPOptions struct {
	// Version is the release (the image tag in the manifest), Binary kube-vip built at it.
	Version, Binary string
	// NoElection (BGP only): every kube-vip node announces the VIP (vip_leaderelection
	// false), the overlap nothing fences; otherwise kube-vip elects on its Lease.
	NoElection bool
}
