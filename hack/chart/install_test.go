package chart

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/caplb/caplb/e2e/envtest"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestInstallUpgradeUninstall installs the chart (manager, webhook with the generated certificate,
// agent) with helm's action package on a real kube-apiserver and etcd (e2e/envtest, no CRDs: the
// chart brings its own), upgrades it with a changed value and uninstalls it. The generated gossip
// key and webhook certificate survive the upgrade (lookup), the CRDs and the gossip key survive the
// uninstall (resource-policy keep), everything else is gone.
func TestInstallUpgradeUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver and etcd")
	}
	g := NewWithT(t)
	env, err := envtest.Start(envtest.Options{WithoutCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := env.Config
	g.Expect(clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"test": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: "test", Namespace: ns}},
		CurrentContext: "test",
	}, kubeconfig)).To(Succeed())
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	nsName := ns
	flags.Namespace = &nsName
	actions := &action.Configuration{}
	g.Expect(actions.Init(flags, ns, "secret", t.Logf)).To(Succeed())
	kube, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()

	c := load(t)
	install := action.NewInstall(actions)
	install.ReleaseName = "caplb"
	install.Namespace = ns
	install.CreateNamespace = true
	_, err = install.Run(c, agentValues())
	g.Expect(err).NotTo(HaveOccurred())
	gossip := secretData(t, kube, "caplb-agent-gossip", "gossip.key")
	cert := secretData(t, kube, "caplb-webhook-service-cert", "tls.crt")
	g.Expect(gossip).To(HaveLen(32))
	_, err = kube.AppsV1().DaemonSets(ns).Get(ctx, "caplb-agent", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	upgrade := action.NewUpgrade(actions)
	upgrade.Namespace = ns
	_, err = upgrade.Run("caplb", c, chartutil.CoalesceTables(values("manager: {concurrency: 7}"), agentValues()))
	g.Expect(err).NotTo(HaveOccurred())
	d, err := kube.AppsV1().Deployments(ns).Get(ctx, "caplb-controller-manager", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--concurrency=7"))
	g.Expect(secretData(t, kube, "caplb-agent-gossip", "gossip.key")).To(Equal(gossip), "the gossip key survives an upgrade")
	g.Expect(secretData(t, kube, "caplb-webhook-service-cert", "tls.crt")).To(Equal(cert), "the webhook certificate survives an upgrade")

	_, err = action.NewUninstall(actions).Run("caplb")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kube.AppsV1().Deployments(ns).Get(ctx, "caplb-controller-manager", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the manager is gone: %v", err)
	_, err = kube.RbacV1().ClusterRoles().Get(ctx, "caplb-manager", metav1.GetOptions{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "its ClusterRole is gone: %v", err)
	g.Expect(secretData(t, kube, "caplb-agent-gossip", "gossip.key")).To(Equal(gossip), "the gossip key is kept")
	crds, err := kube.Discovery().ServerResourcesForGroupVersion("loadbalancer.cluster.x-k8s.io/v1alpha1")
	g.Expect(err).NotTo(HaveOccurred(), "the CRDs are kept")
	g.Expect(crds.APIResources).NotTo(BeEmpty())
}

func secretData(t *testing.T, kube kubernetes.Interface, name, key string) []byte {
	t.Helper()
	s, err := kube.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return s.Data[key]
}
