//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/cloudinit"
	"github.com/caplb/caplb/e2e/testinfra"
	"github.com/caplb/caplb/e2e/testpki"
)

// Where a kubeadm node keeps what the lab's stand-ins for kubeadm and the kubelet write.
const (
	manifestPath   = "/etc/kubernetes/manifests/caplb-agent.yaml"
	caPath         = "/etc/kubernetes/pki/ca.crt"
	servingCrtPath = "/etc/kubernetes/pki/apiserver.crt"
	servingKeyPath = "/etc/kubernetes/pki/apiserver.key"
	kubeletConf    = "/etc/kubernetes/kubelet.conf"
	kubeletClient  = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	// nodeAPIListen is where a node reaches its workload API server: the kubelet's kubeconfig
	// points there (a loopback proxy to the test API server).
	nodeAPIListen = "127.0.0.1:16443"
	apiPort       = 6443
)

// Node is one control-plane machine of the lab: a network namespace on the segment, a root
// directory standing for its disk, a stand-in API server, and the agent's static pod.
type Node struct {
	Name  string
	Index int
	NS    *lab.Netns
	Addr  netip.Addr
	// Root is the machine's "/": its bootstrap wrote into it.
	Root             string
	standin, kubelet *lab.Process
	proxy            *lab.APIProxy
	failFile, rootfs string
	deps             *nodeDeps
	providerID       string
	// cp is the real control plane's part of the machine (nil with the stand-in).
	cp *cpMachine
	// runsKubeVIP: the machine booted with kube-vip's files, not caplb's; stopKubeVIP ends its
	// pod's restarts, kubeVIPDone closes when they ended (kubevip.go).
	runsKubeVIP              bool
	stopKubeVIP, kubeVIPDone chan struct{}
	// kubeadmStep is the kubeadm command of the machine's CABPK data (nil: the lab's bootstrap).
	kubeadmStep *cloudinit.KubeadmStep
}

// nodeDeps is what booting a machine needs from the lab.
type nodeDeps struct {
	lab      *lab.Lab
	topo     *topology
	ca       *testpki.CA
	bins     Binaries
	workload *workload
	files    []bootFile
	// vip is the endpoint's address (a SAN of every serving certificate, as kubeadm puts the
	// controlPlaneEndpoint host there).
	vip        func() string
	agentImage string
	// kubeVIP is the kube-vip binary the lab's kubelet runs for its static pod (kubevip.go).
	kubeVIP string
	// real makes machines run a real control plane (nil: the stand-in API server); the
	// management client and the cluster's name find its CA Secrets, scheme reads Nodes.
	real        *realCP
	mgmt        client.Reader
	clusterName string
	scheme      *runtime.Scheme
	// cabpk: control-plane machines boot from the data CAPI's kubeadm bootstrap provider
	// rendered (bootFromCloudInit); samplePreKubeadm are the sample's preKubeadmCommands.
	cabpk            bool
	samplePreKubeadm []string
}

// boot brings up the machine: its network, the files its bootstrap writes, what kubeadm and the
// kubelet put on a control-plane node, the agent's static pod and the stand-in API server; and
// it registers the Node as the kubelet does.
// With a real control plane, kubeadm makes the machine instead (bootRealCP); others are the
// running machines.
func (d *nodeDeps) boot(ctx context.Context, name string, index int, providerID string, secret *corev1.Secret, others []*Node, role bootRole) (n *Node, err error) {
	n = &Node{Name: name, Index: index, deps: d, providerID: providerID,
		Root:     filepath.Join(d.lab.Dir(), "machines", name, "root"),
		rootfs:   filepath.Join(d.lab.Dir(), "machines", name, "rootfs"),
		failFile: filepath.Join(d.lab.Dir(), "machines", name, "readyz-fail")}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("booting machine %s: %w", name, err), n.destroy())
		}
	}()
	for _, dir := range []string{n.Root, n.rootfs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return n, err
		}
	}
	if n.NS, err = d.lab.AddNamespace(name); err != nil {
		return n, err
	}
	if n.Addr, err = d.topo.addNode(n.NS, index); err != nil {
		return n, err
	}
	// cloud-init: the bootstrap's write_files.
	if d.cabpk && !role.worker && !role.kubeVIP {
		if n.kubeadmStep, err = d.bootFromCloudInit(n, secret); err != nil {
			return n, err
		}
		if len(d.samplePreKubeadm) > 0 {
			d.lab.Logf("boot", "%s: the sample's preKubeadmCommands not run (no shell on a lab machine): %q", n.Name, d.samplePreKubeadm)
		}
	} else {
		files := d.files
		if role.worker || role.kubeVIP {
			files = role.files
		}
		if err := writeBootFiles(n.Root, files, secret); err != nil {
			return n, err
		}
	}
	if role.worker {
		return n, d.bootWorker(ctx, n, secret)
	}
	if d.real != nil {
		n.runsKubeVIP = role.kubeVIP
		return n, d.bootRealCP(ctx, n, secret.Namespace, others)
	}
	// kubeadm: the cluster CA, the API server's serving certificate (kubeadm's SANs: node name,
	// kubernetes*, the service IP, the advertise address, the endpoint), the kubelet's
	// kubeconfig and client certificate.
	if err := writeFile(filepath.Join(n.Root, caPath), d.ca.PEM, 0o644); err != nil {
		return n, err
	}
	crt, key, err := d.ca.IssueServing(filepath.Dir(n.rootfs), "apiserver", name, n.Addr.String(), d.vip())
	if err != nil {
		return n, err
	}
	for src, dst := range map[string]string{crt: servingCrtPath, key: servingKeyPath} {
		b, err := os.ReadFile(src)
		if err != nil {
			return n, err
		}
		if err := writeFile(filepath.Join(n.Root, dst), b, 0o600); err != nil {
			return n, err
		}
	}
	if err := d.workload.writeKubeletConfig(ctx, name, n.Root); err != nil {
		return n, err
	}
	if n.proxy, err = lab.ProxyInto(n.NS, nodeAPIListen, d.workload.hostPort); err != nil {
		return n, err
	}
	// The kubelet starts the static pods: the agent (from the manifest the bootstrap wrote)
	// and the API server.
	if err := n.startAgent(); err != nil {
		return n, err
	}
	args := []string{d.bins.Standin, "-name", name,
		"-api-listen", ":" + strconv.Itoa(apiPort),
		"-service-listen", "127.0.0.1:16000", "-readyz-listen", "127.0.0.1:16001",
		"-cert", filepath.Join(n.Root, servingCrtPath), "-key", filepath.Join(n.Root, servingKeyPath),
		"-fail-file", n.failFile}
	if d.workload.goawayChance != "" {
		args = append(args, "-goaway-chance", d.workload.goawayChance)
	}
	if n.standin, err = n.NS.Start(name+"-apiserver", args, nil); err != nil {
		return n, err
	}
	labels := map[string]string{corev1.LabelHostname: name, "node-role.kubernetes.io/control-plane": ""}
	if err := registerNode(ctx, d.workload.client, name, providerID, n.Addr, labels); err != nil {
		return n, err
	}
	return n, nil
}

// startAgent runs the agent's static pod the way the kubelet would (e2e/lab/podrun).
func (n *Node) startAgent() error {
	p, err := n.NS.Start(n.Name+"-agent", []string{"unshare", "--mount", "--uts", "--propagation", "private",
		n.deps.bins.Podrun, "-root", n.Root, "-rootfs", n.rootfs, "-manifest", manifestPath,
		"-hostname", n.Name, "-image", n.deps.agentImage + "=" + n.deps.bins.Agent}, nil)
	n.kubelet = p
	return err
}

// SetHealthy makes the node's API server /readyz pass or fail; a real one is stopped and
// started again.
func (n *Node) SetHealthy(ok bool) error {
	if n.cp != nil {
		return n.setAPIHealthy(ok)
	}
	if ok {
		if err := os.Remove(n.failFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(n.failFile, []byte("fail\n"), 0o644)
}

// destroy is the machine's deletion by its infrastructure: everything on it stops at once.
func (n *Node) destroy() error {
	var errs []error
	n.stopKubeVIPPod()
	procs := []*lab.Process{n.kubelet, n.standin}
	if n.cp != nil && n.cp.stopKubelet != nil {
		n.cp.stopKubelet()
	}
	if n.cp != nil {
		procs = append(procs, n.cp.controllerManager, n.cp.apiserver, n.cp.etcd)
	}
	for _, p := range procs {
		if p != nil {
			_ = p.Stop(time.Second)
		}
	}
	if n.proxy != nil {
		errs = append(errs, n.proxy.Close())
	}
	if n.NS != nil {
		errs = append(errs, n.deps.lab.RemoveNamespace(n.NS))
	}
	return errors.Join(errs...)
}

// workload is the workload cluster's API server, as the lab's machines see it.
type workload struct {
	env      *envtest.Env
	client   client.Client
	hostPort string
	// goawayChance is the sample's kube-apiserver --goaway-chance, which the stand-ins apply
	// as kube-apiserver does: a drained member's busy HTTP/2 clients move before its reset.
	goawayChance string
}

// writeKubeletConfig writes the kubelet's kubeconfig for system:node:<name> (group
// system:nodes) with its client certificate in /var/lib/kubelet/pki, as kubeadm's TLS bootstrap
// leaves them. The credential may read Nodes and change only its own, as the Node authorizer
// allows a kubelet.
func (w *workload) writeKubeletConfig(ctx context.Context, name, root string) error {
	user := "system:node:" + name
	if err := w.grantOwnNode(ctx, name, user); err != nil {
		return err
	}
	au, err := w.env.Environment.AddUser(crenvtest.User{Name: user, Groups: []string{"system:nodes"}}, nil)
	if err != nil {
		return fmt.Errorf("kubelet credential for %s: %w", name, err)
	}
	rc := au.Config()
	pem := append(append([]byte{}, rc.CertData...), rc.KeyData...)
	if err := writeFile(filepath.Join(root, kubeletClient), pem, 0o600); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: "https://" + nodeAPIListen, CertificateAuthorityData: rc.CAData}
	kc.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: kubeletClient, ClientKey: kubeletClient}
	kc.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	kc.CurrentContext = "default-context"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(root, kubeletConf), b, 0o600)
}

func (w *workload) grantOwnNode(ctx context.Context, name, user string) error {
	objs := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lab:node:" + name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"patch", "update"}, ResourceNames: []string{name}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lab:node:" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lab:node:" + name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
	}
	for _, o := range objs {
		if err := w.client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubelet RBAC for %s: %w", name, err)
		}
	}
	return nil
}

// registerNode creates the Node with its address and a Ready status through c, as the kubelet's
// first start does (the kubelet's --node-ip pins the InternalIP to the machine's own address).
func registerNode(ctx context.Context, c client.Client, name, providerID string, addr netip.Addr, labels map[string]string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.NodeSpec{ProviderID: providerID}}
	if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering Node %s: %w", name, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		return err
	}
	return testinfra.SetNodeReady(ctx, c, node, true, []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: addr.String()}, {Type: corev1.NodeHostName, Address: name}})
}
