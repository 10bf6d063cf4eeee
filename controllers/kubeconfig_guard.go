package controllers

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A <cluster>-kubeconfig Secret is written by whoever may write Secrets in the Cluster's
// namespace (a tenant), but client-go acts on it with the manager's own filesystem, processes
// and network. CAPI's ClusterCache refuses exec and auth-provider, not file references: a
// tokenFile naming /var/run/secrets/kubernetes.io/serviceaccount/token and a server of the
// tenant's makes the manager send its own ServiceAccount token there. checkKubeconfig refuses
// every field that reaches outside the Secret, so that only the Secret's own bytes are used.

// kubeconfigRefusal says which field of a kubeconfig made the manager refuse it. It never holds
// the kubeconfig's values (tokens, keys), only names and paths of fields.
type kubeconfigRefusal struct {
	// Reason is the WorkloadClusterReachable reason naming the field (lbv1.Kubeconfig*Reason).
	Reason string
	// Field is the kubeconfig path of the offending field, e.g. users["tenant"].user.tokenFile.
	Field string
	// Fix says what to write instead.
	Fix string
}

func (r *kubeconfigRefusal) Error() string {
	if r.Field == "" {
		return "kubeconfig refused: " + r.Fix
	}
	return fmt.Sprintf("kubeconfig refused: %s is not allowed: %s", r.Field, r.Fix)
}

// checkKubeconfig returns a *kubeconfigRefusal when data, a kubeconfig as CAPI stores it in a
// <cluster>-kubeconfig Secret, references a file or a program, or names a proxy; nil when it
// carries everything inline. It decodes data with the loader the ClusterCache uses
// (clientcmd.Load), so it judges exactly the fields client-go would act on, and it checks every
// cluster and user, not only the current context's: a context switch must not bring one in.
// The first offence in name order is reported, so the answer is stable across reconciles.
func checkKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The parser's error may quote the input: say only that it does not parse.
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigInvalidReason,
			Fix: "the Secret's kubeconfig does not parse; write a kubeconfig with every credential inline"}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Clusters)) {
		if r := checkKubeconfigCluster(name, cfg.Clusters[name]); r != nil {
			return r
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.AuthInfos)) {
		if r := checkKubeconfigUser(name, cfg.AuthInfos[name]); r != nil {
			return r
		}
	}
	return nil
}

func checkKubeconfigCluster(name string, c *clientcmdapi.Cluster) *kubeconfigRefusal {
	if c == nil {
		return nil
	}
	field := func(f string) string { return fmt.Sprintf("clusters[%q].cluster.%s", name, f) }
	switch {
	case c.CertificateAuthority != "":
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigCertificateAuthorityFileReason, Field: field("certificate-authority"),
			Fix: "a file path is read on the manager's machine; put the CA bundle in certificate-authority-data"}
	case c.ProxyURL != "":
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigProxyURLReason, Field: field("proxy-url"),
			Fix: "the manager does not send its requests through a proxy a Secret names; remove it"}
	}
	return nil
}

func checkKubeconfigUser(name string, u *clientcmdapi.AuthInfo) *kubeconfigRefusal {
	if u == nil {
		return nil
	}
	field := func(f string) string { return fmt.Sprintf("users[%q].user.%s", name, f) }
	const file = "a file path is read on the manager's machine (where its own ServiceAccount token is a file)"
	switch {
	case u.TokenFile != "":
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigTokenFileReason, Field: field("tokenFile"),
			Fix: file + "; put the token itself in token"}
	case u.ClientCertificate != "":
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigClientCertificateFileReason, Field: field("client-certificate"),
			Fix: file + "; put the certificate in client-certificate-data"}
	case u.ClientKey != "":
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigClientKeyFileReason, Field: field("client-key"),
			Fix: file + "; put the key in client-key-data"}
	case u.Exec != nil:
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigExecReason, Field: field("exec"),
			Fix: "the manager runs no program a Secret names; use token or client-certificate-data and client-key-data"}
	case u.AuthProvider != nil:
		return &kubeconfigRefusal{Reason: lbv1.KubeconfigAuthProviderReason, Field: field("auth-provider"),
			Fix: "auth-provider plugins may run programs or read files; use token or client-certificate-data and client-key-data"}
	}
	return nil
}
