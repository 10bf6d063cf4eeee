package release

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/caplb/caplb/controllers"
)

// The released webhook pieces fit together as a CAPI provider's do: the
// ValidatingWebhookConfiguration calls the manager's webhook path through the Service, which
// selects the manager's pods and targets its webhook port; cert-manager's Certificate (from a
// self-signed Issuer) covers the Service's DNS name and writes the Secret the manager mounts at
// its --webhook-cert-dir; the configuration's CA comes from that Certificate (inject-ca-from).
// Requests that cannot be answered fail closed, and only creates and updates of LoadBalancers
// are sent.
func TestWebhookComponents(t *testing.T) {
	g := NewWithT(t)
	out, err := Components(testOptions(t))
	g.Expect(err).NotTo(HaveOccurred())
	processed, err := yamlprocessor.NewSimpleProcessor().Process(out, func(string) (string, error) { return "", os.ErrNotExist })
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := utilyaml.ToUnstructured(processed)
	g.Expect(err).NotTo(HaveOccurred())
	byKind := map[string]unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = o
	}
	decode := func(kind string, into any) {
		o, ok := byKind[kind]
		g.Expect(ok).To(BeTrue(), "the components have no %s", kind)
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into)).To(Succeed(), kind)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	decode("ValidatingWebhookConfiguration", vwc)
	svc := &corev1.Service{}
	decode("Service", svc)
	d := &appsv1.Deployment{}
	decode("Deployment", d)
	cert, issuer := byKind["Certificate"], byKind["Issuer"]
	g.Expect(cert.GetAPIVersion()).To(Equal("cert-manager.io/v1"))
	g.Expect(issuer.GetAPIVersion()).To(Equal("cert-manager.io/v1"))

	g.Expect(vwc.Webhooks).To(HaveLen(1))
	w := vwc.Webhooks[0]
	g.Expect(w.Name).To(Equal(controllers.ValidatingWebhookName))
	g.Expect(w.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
	g.Expect(w.SideEffects).To(HaveValue(Equal(admissionregistrationv1.SideEffectClassNone)))
	g.Expect(w.AdmissionReviewVersions).To(Equal([]string{"v1"}))
	g.Expect(w.Rules).To(HaveLen(1))
	r := w.Rules[0]
	g.Expect(r.APIGroups).To(Equal([]string{"loadbalancer.cluster.x-k8s.io"}))
	g.Expect(r.Resources).To(Equal([]string{"loadbalancers"}), "no subresource: status patches are not sent")
	g.Expect(r.Operations).To(ConsistOf(admissionregistrationv1.Create, admissionregistrationv1.Update))
	g.Expect(w.MatchConditions).NotTo(BeEmpty())

	ref := w.ClientConfig.Service
	g.Expect(ref).NotTo(BeNil(), "the API server reaches the webhook through the Service")
	g.Expect(ref.Path).To(HaveValue(Equal(controllers.ValidatingWebhookPath)))
	g.Expect(ref.Name).To(Equal(svc.Name))
	g.Expect(ref.Namespace).To(Equal(svc.Namespace))
	g.Expect(svc.Spec.Selector).NotTo(BeEmpty())
	for k, v := range svc.Spec.Selector {
		g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue(k, v), "the Service selects the manager's pods")
	}
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	var target intstr.IntOrString
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			target = p.TargetPort
		}
	}
	g.Expect(target.String()).NotTo(BeEmpty(), "the Service has no port %d", port)

	var c corev1.Container
	for _, cc := range d.Spec.Template.Spec.Containers {
		if cc.Name == ManagerContainer {
			c = cc
		}
	}
	var containerPort int32
	for _, p := range c.Ports {
		if p.Name == target.String() || p.ContainerPort == target.IntVal {
			containerPort = p.ContainerPort
		}
	}
	g.Expect(containerPort).NotTo(BeZero(), "the Service targets port %s, which the manager container does not declare", target.String())
	args := strings.Join(c.Args, " ")
	g.Expect(args).NotTo(ContainSubstring("--webhook-port=0"), "the released manager serves the webhook")
	g.Expect(c.Args).To(ContainElement(ContainSubstring("--webhook-port=")))
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--webhook-port="); ok {
			g.Expect(v).To(Equal(strconv.Itoa(int(containerPort))), "the manager listens where the Service sends")
		}
	}

	// cert-manager: the CA to inject, the names, the Secret.
	g.Expect(vwc.Annotations).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", cert.GetNamespace()+"/"+cert.GetName()))
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	g.Expect(dnsNames).To(ContainElement(svc.Name+"."+svc.Namespace+".svc"), "the name the API server verifies")
	issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	g.Expect(issuerKind).To(Equal("Issuer"))
	g.Expect(issuerName).To(Equal(issuer.GetName()))
	g.Expect(issuer.GetNamespace()).To(Equal(cert.GetNamespace()))
	_, selfSigned, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned")
	g.Expect(selfSigned).To(BeTrue(), "a self-signed Issuer, as CAPI providers ship")
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	g.Expect(secretName).NotTo(BeEmpty())
	var certDir string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--webhook-cert-dir="); ok {
			certDir = v
		}
	}
	g.Expect(certDir).NotTo(BeEmpty())
	var volume string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secretName {
			volume = v.Name
		}
	}
	g.Expect(volume).NotTo(BeEmpty(), "the manager mounts the Certificate's Secret %s", secretName)
	g.Expect(c.VolumeMounts).To(ContainElement(And(HaveField("Name", volume), HaveField("MountPath", certDir), HaveField("ReadOnly", true))))
}

// The optional NetworkPolicy (config/networkpolicy) fits the manager it guards: it selects the
// manager's pods, lets the webhook port in only from an ipBlock (the API server's addresses),
// and keeps every other port the manager container declares open, so applying it takes nothing
// from metrics or probes. config/default does not include it: its CIDR is per platform.
func TestWebhookNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	o := testOptions(t)
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(o.Root, "config", "networkpolicy"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rm.Resources()).To(HaveLen(1))
	m, err := rm.Resources()[0].Map()
	g.Expect(err).NotTo(HaveOccurred())
	np := &networkingv1.NetworkPolicy{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(m, np)).To(Succeed())

	out, err := Components(o)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).NotTo(ContainSubstring("kind: NetworkPolicy"), "not enabled by default")
	processed, err := yamlprocessor.NewSimpleProcessor().Process(out, func(string) (string, error) { return "", os.ErrNotExist })
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := utilyaml.ToUnstructured(processed)
	g.Expect(err).NotTo(HaveOccurred())
	d := &appsv1.Deployment{}
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" {
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, d)).To(Succeed())
		}
	}
	g.Expect(np.Namespace).To(Equal(d.Namespace))
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(np.Spec.PodSelector.MatchLabels).NotTo(BeEmpty())
	g.Expect(sel.Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue(), "the policy selects the manager's pods")
	g.Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))

	var c corev1.Container
	for _, cc := range d.Spec.Template.Spec.Containers {
		if cc.Name == ManagerContainer {
			c = cc
		}
	}
	// A rule's port, resolved against the container's ports as the network plugin does.
	matches := func(p networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
		return p.Port == nil || (p.Port.Type == intstr.String && p.Port.StrVal == cp.Name) ||
			(p.Port.Type == intstr.Int && p.Port.IntVal == cp.ContainerPort)
	}
	g.Expect(c.Ports).NotTo(BeEmpty())
	for _, cp := range c.Ports {
		var rules []networkingv1.NetworkPolicyIngressRule
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if matches(p, cp) {
					rules = append(rules, r)
				}
			}
		}
		g.Expect(rules).NotTo(BeEmpty(), "port %s (%d) is let in by no rule", cp.Name, cp.ContainerPort)
		if cp.Name != "webhook-server" {
			continue
		}
		for _, r := range rules {
			g.Expect(r.From).NotTo(BeEmpty(), "the webhook port is open to every source")
			for _, peer := range r.From {
				g.Expect(peer.IPBlock).NotTo(BeNil(), "the webhook port admits pods: %+v", peer)
				g.Expect(peer.PodSelector).To(BeNil())
				g.Expect(peer.NamespaceSelector).To(BeNil())
			}
		}
	}
}
