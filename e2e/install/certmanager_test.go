package install

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/caplb/caplb/e2e/harness"
	"github.com/caplb/caplb/e2e/testpki"
	"github.com/caplb/caplb/hack/release"
)

// `clusterctl init` installs cert-manager before any provider; the release's webhook relies on
// it for its serving certificate (Issuer, Certificate) and for the CA in its
// ValidatingWebhookConfiguration (cainjector). cert-manager cannot be fetched here (no network),
// so the install test plays it — and the kubelet and endpoints controller it also lacks — with
// exactly the names the installed objects carry, so that the shipped webhook configuration is
// really exercised: the API server calls the manager binary through the shipped Service, verifies
// the certificate against the injected CA and the Service's DNS name.

const injectCAAnnotation = "cert-manager.io/inject-ca-from"

// installCertManagerCRDs serves cert-manager's Certificate and Issuer kinds (cert-manager.io/v1)
// with schemaless stand-ins of its CRDs, so that the release's objects can be created.
func installCertManagerCRDs(ctx context.Context, t *testing.T, env *harness.Env) {
	t.Helper()
	g := NewWithT(t)
	for _, kind := range []string{"Certificate", "Issuer"} {
		plural := strings.ToLower(kind) + "s"
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
			},
		}
		g.Expect(env.Client.Create(ctx, crd)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)).To(Succeed())
			established := false
			for _, c := range crd.Status.Conditions {
				established = established || c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			}
			g.Expect(established).To(BeTrue())
		}, timeout, harness.PollInterval).Should(Succeed(), "the %s CRD established", kind)
	}
}

// webhookRelease is what the release installed for its webhook, found by the names the objects
// carry after clusterctl moved them into the target namespace.
type webhookRelease struct {
	config  *admissionregistrationv1.ValidatingWebhookConfiguration
	service *corev1.Service
	cert    *unstructured.Unstructured
}

func findWebhookRelease(ctx context.Context, t *testing.T, env *harness.Env) webhookRelease {
	t.Helper()
	g := NewWithT(t)
	var configs admissionregistrationv1.ValidatingWebhookConfigurationList
	g.Expect(env.Client.List(ctx, &configs, client.MatchingLabels{"cluster.x-k8s.io/provider": release.ProviderLabel})).To(Succeed())
	g.Expect(configs.Items).To(HaveLen(1), "the release's ValidatingWebhookConfiguration")
	r := webhookRelease{config: &configs.Items[0], service: &corev1.Service{}, cert: &unstructured.Unstructured{}}
	g.Expect(r.config.Webhooks).NotTo(BeEmpty())
	ref := r.config.Webhooks[0].ClientConfig.Service
	g.Expect(ref).NotTo(BeNil())
	g.Expect(ref.Namespace).To(Equal(targetNamespace), "clusterctl moves the Service reference")
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, r.service)).To(Succeed())

	certRef := r.config.Annotations[injectCAAnnotation]
	ns, name, ok := strings.Cut(certRef, "/")
	g.Expect(ok).To(BeTrue(), "%s=%q", injectCAAnnotation, certRef)
	g.Expect(ns).To(Equal(targetNamespace), "clusterctl moves the %s annotation", injectCAAnnotation)
	r.cert.SetAPIVersion("cert-manager.io/v1")
	r.cert.SetKind("Certificate")
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, r.cert)).To(Succeed())
	return r
}

// issueWebhookCertificate plays cert-manager and its cainjector: it issues the Certificate (its
// spec.dnsNames; from the test PKI's CA rather than self-signed, which changes nothing the API
// server checks) into its spec.secretName, and writes that Secret's CA into the webhook
// configuration's caBundle. It returns the Secret's data, which the manager's pod mounts.
func issueWebhookCertificate(ctx context.Context, t *testing.T, env *harness.Env, r webhookRelease) map[string][]byte {
	t.Helper()
	g := NewWithT(t)
	dnsNames, _, _ := unstructured.NestedStringSlice(r.cert.Object, "spec", "dnsNames")
	g.Expect(dnsNames).To(ContainElement(r.service.Name+"."+r.service.Namespace+".svc"),
		"the Certificate covers the name the API server verifies (clusterctl rewrote its namespace)")
	secretName, _, _ := unstructured.NestedString(r.cert.Object, "spec", "secretName")
	g.Expect(secretName).NotTo(BeEmpty())
	issuerName, _, _ := unstructured.NestedString(r.cert.Object, "spec", "issuerRef", "name")
	issuer := &unstructured.Unstructured{}
	issuer.SetAPIVersion("cert-manager.io/v1")
	issuer.SetKind("Issuer")
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: r.cert.GetNamespace(), Name: issuerName}, issuer)).To(Succeed(), "the Certificate's Issuer")

	ca, err := testpki.NewCA(t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	tls, err := ca.IssueWebhookServing("", dnsNames...)
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.cert.GetNamespace(), Name: secretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": tls.Cert, "tls.key": tls.Key, "ca.crt": tls.CA},
	}
	g.Expect(env.Client.Create(ctx, secret)).To(Succeed())

	patched := r.config.DeepCopy()
	for i := range patched.Webhooks {
		patched.Webhooks[i].ClientConfig.CABundle = secret.Data["ca.crt"]
	}
	g.Expect(env.Client.Patch(ctx, patched, client.MergeFrom(r.config))).To(Succeed())
	*r.config = *patched
	return secret.Data
}

// mountWebhookCertificate writes the Secret's data as its volume appears in the manager's pod.
func mountWebhookCertificate(t *testing.T, data map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range data {
		if err := os.WriteFile(filepath.Join(dir, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// routeWebhookService plays the endpoints controller: the webhook Service's EndpointSlice points
// at the manager process (listening on every address, as in its pod) through one of this host's
// own addresses — an EndpointSlice refuses loopback — at port (the pod's webhook-server port).
func routeWebhookService(ctx context.Context, t *testing.T, env *harness.Env, svc *corev1.Service, port int32) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	addr := hostAddress(t)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-test",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(svc.Spec.Ports[0].Name), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	g.Expect(env.Client.Create(ctx, slice)).To(Succeed())
}

// hostAddress returns an IPv4 address of this host that an EndpointSlice accepts (not loopback,
// not link-local).
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip := ipn.IP.To4(); ip != nil && ip.IsGlobalUnicast() && !ip.IsLinkLocalUnicast() {
				return ip.String()
			}
		}
	}
	t.Fatalf("this host has no IPv4 address besides loopback and link-local (%v): the API server reaches the webhook Service's endpoints only at such an address", addrs)
	return ""
}

// withoutWebhookConfigurations removes the release's ValidatingWebhookConfiguration (what an
// older release without a webhook had) and returns the function that puts it back.
func withoutWebhookConfigurations(ctx context.Context, t *testing.T, env *harness.Env) (restore func()) {
	t.Helper()
	g := NewWithT(t)
	var configs admissionregistrationv1.ValidatingWebhookConfigurationList
	g.Expect(env.Client.List(ctx, &configs, client.MatchingLabels{"cluster.x-k8s.io/provider": release.ProviderLabel})).To(Succeed())
	for i := range configs.Items {
		g.Expect(env.Client.Delete(ctx, &configs.Items[i])).To(Succeed())
	}
	return func() {
		for _, c := range configs.Items {
			c.ObjectMeta = metav1.ObjectMeta{Name: c.Name, Labels: c.Labels, Annotations: c.Annotations}
			g.Expect(env.Client.Create(ctx, &c)).To(Succeed())
		}
	}
}
