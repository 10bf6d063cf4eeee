package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/config/workload"
	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/e2e/testinfra"
)

// Workload is a second API server playing a workload cluster that CAPI does not provision (an
// externally managed cluster): no CRDs, its own etcd, the RBAC of config/workload applied, and a
// ServiceAccount token the management cluster's kubeconfig Secret carries. A flow that reaches
// its Nodes through it proves that the manager writes to the workload cluster with exactly that
// RBAC, and stopping it is a real outage (connections refused), not a simulated one.
type Workload struct {
	// ControlPlane is its kube-apiserver and etcd.
	ControlPlane *envtest.Env
	// Client is a cluster-admin client, for the test's own reads and writes (playing the
	// kubelets, the agents and the cluster's lifecycle tool).
	Client client.Client
	// Kubeconfig authenticates as config/workload's ServiceAccount, with its RBAC only.
	Kubeconfig []byte
}

// StartWorkload starts a workload API server, applies config/workload/rbac.yaml to it and
// issues a token for its ServiceAccount.
func (e *Env) StartWorkload(ctx context.Context) (*Workload, error) {
	// A short stop: the ClusterCaches' open watches hold kube-apiserver's graceful shutdown past
	// 20s; after 2s it is killed, which is as real an outage (see Stop).
	cp, err := envtest.Start(envtest.Options{WithoutCRDs: true, StopTimeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("starting the workload API server: %w", err)
	}
	w, err := newWorkload(ctx, e, cp)
	if err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	return w, nil
}

func newWorkload(ctx context.Context, e *Env, cp *envtest.Env) (*Workload, error) {
	c, err := client.New(cp.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the workload client: %w", err)
	}
	objs, err := Decode(workload.RBAC)
	if err != nil {
		return nil, fmt.Errorf("config/workload/rbac.yaml: %w", err)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("config/workload/rbac.yaml: creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, fmt.Errorf("creating the workload clientset: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(workload.Namespace).CreateToken(ctx, workload.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("issuing a token for %s/%s: %w", workload.Namespace, workload.ServiceAccount, err)
	}
	kc, err := tokenKubeconfig(cp.Config, tr.Status.Token)
	if err != nil {
		return nil, err
	}
	return &Workload{ControlPlane: cp, Client: c, Kubeconfig: kc}, nil
}

// tokenKubeconfig is the kubeconfig a platform engineer writes for `kubectl create token`: the
// API server's address and CA, and the bearer token.
func tokenKubeconfig(cfg *rest.Config, token string) ([]byte, error) {
	const name = "workload"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	out, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing the workload kubeconfig: %w", err)
	}
	return out, nil
}

// Stop stops the workload API server (a real outage for whoever reaches it). Safe to call twice.
// A kube-apiserver that does not finish its graceful shutdown in time is killed (envtest sends
// SIGKILL and reports the timeout): that is a stop too, once its port refuses connections.
func (w *Workload) Stop() error {
	err := w.ControlPlane.Stop()
	if err == nil {
		return nil
	}
	u, perr := url.Parse(w.ControlPlane.Config.Host)
	if perr != nil {
		return errors.Join(err, perr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		conn, derr := net.DialTimeout("tcp", u.Host, time.Second)
		if derr != nil {
			return nil // killed: nothing answers any more
		}
		_ = conn.Close()
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the workload API server still accepts connections after stopping: %w", err)
}

// CreateKubeconfigSecret creates the <cluster>-kubeconfig Secret for the workload cluster in
// the management cluster, as the tool that built the cluster would.
func (w *Workload) CreateKubeconfigSecret(ctx context.Context, mgmt client.Client, c *clusterv1.Cluster) error {
	if err := mgmt.Create(ctx, kubeconfig.GenerateSecret(c, w.Kubeconfig)); err != nil {
		return fmt.Errorf("creating kubeconfig Secret for Cluster %s: %w", c.Name, err)
	}
	return nil
}

// CreateNode registers a Ready Node in the workload cluster, as its kubelet would.
func (w *Workload) CreateNode(ctx context.Context, name string, labels map[string]string, internalIP string) (*corev1.Node, error) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := w.Client.Create(ctx, n); err != nil {
		return nil, fmt.Errorf("creating workload Node %s: %w", name, err)
	}
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
	if err := testinfra.SetNodeReady(ctx, w.Client, n, true, addrs); err != nil {
		return nil, err
	}
	return n, nil
}
