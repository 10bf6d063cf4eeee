package endpointmove

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The objects a kubeadm cluster keeps its endpoint in, and their keys. The names are kubeadm's
// and cluster-bootstrap's (k8s.io/cluster-bootstrap/token/api, cmd/kubeadm/app/constants),
// repeated here rather than imported: cluster-bootstrap is only an indirect dependency.
const (
	// ClusterInfoNamespace and ClusterInfoName: the ConfigMap joiners read before they trust the
	// cluster (kubeadm's token discovery).
	ClusterInfoNamespace = "kube-public"
	ClusterInfoName      = "cluster-info"
	// ClusterInfoKubeconfigKey holds the kubeconfig the bootstrap signer signs.
	ClusterInfoKubeconfigKey = "kubeconfig"
	// JWSSignatureKeyPrefix prefixes one detached JWS signature per bootstrap token ID.
	JWSSignatureKeyPrefix = "jws-kubeconfig-"

	// KubeadmConfigNamespace and KubeadmConfigName: kubeadm's uploaded configuration.
	KubeadmConfigNamespace = "kube-system"
	KubeadmConfigName      = "kubeadm-config"
	// ClusterConfigurationKey holds the ClusterConfiguration document.
	ClusterConfigurationKey = "ClusterConfiguration"

	// KubeProxyNamespace and KubeProxyName: the kube-proxy addon's ConfigMap.
	KubeProxyNamespace = "kube-system"
	KubeProxyName      = "kube-proxy"
	// KubeProxyKubeconfigKey holds the kubeconfig kube-proxy Pods read at start.
	KubeProxyKubeconfigKey = "kubeconfig.conf"

	// KubeconfigSecretKey is the key of CAPI's <cluster>-kubeconfig Secret.
	KubeconfigSecretKey = "value"
)

// RewriteClusterInfo points kube-public/cluster-info's kubeconfig at E2 and drops its
// jws-kubeconfig-* signatures, which no longer match the content. kube-controller-manager's
// bootstrap signer signs the new content for every live token; until it does, `kubeadm join`
// waits for a signature (it polls while the key is missing) instead of failing on a stale one
// (a signature that does not verify ends discovery). Signatures of content already at E2 are
// the signer's and stay.
func (m Move) RewriteClusterInfo(cm *corev1.ConfigMap) (bool, error) {
	text, ok := cm.Data[ClusterInfoKubeconfigKey]
	if !ok {
		return false, fmt.Errorf("ConfigMap %s/%s has no %q key", cm.Namespace, cm.Name, ClusterInfoKubeconfigKey)
	}
	out, changed, err := m.rewriteKubeconfig(text, true)
	if err != nil {
		return false, fmt.Errorf("ConfigMap %s/%s key %q: %w", cm.Namespace, cm.Name, ClusterInfoKubeconfigKey, err)
	}
	if !changed {
		return false, nil
	}
	cm.Data[ClusterInfoKubeconfigKey] = out
	for k := range cm.Data {
		if strings.HasPrefix(k, JWSSignatureKeyPrefix) {
			delete(cm.Data, k)
		}
	}
	return true, nil
}

// RewriteKubeProxy points kube-system/kube-proxy's kubeconfig.conf at E2. Running kube-proxy
// Pods keep E1 until they restart (they read it at start); E1 stays served meanwhile.
func (m Move) RewriteKubeProxy(cm *corev1.ConfigMap) (bool, error) {
	text, ok := cm.Data[KubeProxyKubeconfigKey]
	if !ok {
		return false, fmt.Errorf("ConfigMap %s/%s has no %q key", cm.Namespace, cm.Name, KubeProxyKubeconfigKey)
	}
	out, changed, err := m.rewriteKubeconfig(text, true)
	if err != nil {
		return false, fmt.Errorf("ConfigMap %s/%s key %q: %w", cm.Namespace, cm.Name, KubeProxyKubeconfigKey, err)
	}
	if changed {
		cm.Data[KubeProxyKubeconfigKey] = out
	}
	return changed, nil
}

// RewriteKubeconfigSecret points every cluster entry of the management cluster's
// <cluster>-kubeconfig Secret whose server is E1 at E2; entries naming other servers (a user's
// additions) are left alone. KCP never rewrites the server itself (it creates the Secret only
// when absent and keeps the server on rotation), and CAPI's ClusterCache reads it only when it
// reconnects, so E1 must stay served until then.
func (m Move) RewriteKubeconfigSecret(s *corev1.Secret) (bool, error) {
	raw, ok := s.Data[KubeconfigSecretKey]
	if !ok {
		return false, fmt.Errorf("Secret %s/%s has no %q key", s.Namespace, s.Name, KubeconfigSecretKey)
	}
	out, changed, err := m.rewriteKubeconfig(string(raw), false)
	if err != nil {
		return false, fmt.Errorf("Secret %s/%s key %q: %w", s.Namespace, s.Name, KubeconfigSecretKey, err)
	}
	if changed {
		s.Data[KubeconfigSecretKey] = []byte(out)
	}
	return changed, nil
}
