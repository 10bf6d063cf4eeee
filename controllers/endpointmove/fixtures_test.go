package endpointmove

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Fixtures as kubeadm v1.36 and CAPI v1.14 write them: cluster-info by clientcmd.Write from
// admin.conf's cluster (name ""), kube-proxy from kubeadm's addon template, kubeadm-config's
// ClusterConfiguration (kubeadm.k8s.io/v1beta4, keys sorted as sigs.k8s.io/yaml writes them),
// the kubeconfig Secret by CAPI's util/kubeconfig.

var testMove = Move{
	Old: lbv1.APIEndpoint{Host: "10.0.0.10", Port: 6443},
	New: lbv1.APIEndpoint{Host: "api.prod.example.com", Port: 443},
}

const caData = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUREVENDQWZXZ0F3SUJBZ0lJCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"

const clusterInfoKubeconfig = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: ` + caData + `
    server: https://10.0.0.10:6443
  name: ""
contexts: null
current-context: ""
kind: Config
preferences: {}
users: null
`

func clusterInfo() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ClusterInfoNamespace, Name: ClusterInfoName, ResourceVersion: "412"},
		Data: map[string]string{
			ClusterInfoKubeconfigKey: clusterInfoKubeconfig,
			"jws-kubeconfig-abcdef":  "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..Xq4lcbq4Z8NEnIYxyEhMdG6-c5XJb9D2gS6Hh0q0x8w",
			"jws-kubeconfig-7k3x9p":  "eyJhbGciOiJIUzI1NiIsImtpZCI6IjdrM3g5cCJ9..5mbCtXrxzQpVg2Ndk5fNn0g6bq2mC8H4Jr2z6u4YQ6M",
		},
	}
}

const kubeProxyKubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://10.0.0.10:6443
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token`

const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
clusterCIDR: 192.168.0.0/16
kind: KubeProxyConfiguration
mode: ""`

func kubeProxy() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: KubeProxyNamespace, Name: KubeProxyName, Labels: map[string]string{"app": "kube-proxy"}},
		Data:       map[string]string{KubeProxyKubeconfigKey: kubeProxyKubeconfig, "config.conf": kubeProxyConfig},
	}
}

const clusterConfiguration = `apiServer:
  certSANs:
  - 127.0.0.1
  - localhost
  extraArgs:
  - name: authorization-mode
    value: Node,RBAC
apiVersion: kubeadm.k8s.io/v1beta4
caCertificateValidityPeriod: 87600h0m0s
certificateValidityPeriod: 8760h0m0s
certificatesDir: /etc/kubernetes/pki
clusterName: prod
controlPlaneEndpoint: 10.0.0.10:6443
controllerManager: {}
dns: {}
encryptionAlgorithm: RSA-2048
etcd:
  local:
    dataDir: /var/lib/etcd
featureGates:
  SomeFutureGate: true
imageRepository: registry.k8s.io
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
networking:
  dnsDomain: cluster.local
  podSubnet: 192.168.0.0/16
  serviceSubnet: 10.96.0.0/12
proxy: {}
scheduler: {}
`

func kubeadmConfig(doc string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: KubeadmConfigNamespace, Name: KubeadmConfigName},
		Data:       map[string]string{ClusterConfigurationKey: doc},
	}
}

const secretKubeconfig = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: ` + caData + `
    server: https://10.0.0.10:6443
  name: prod
contexts:
- context:
    cluster: prod
    user: prod-admin
  name: prod-admin@prod
current-context: prod-admin@prod
kind: Config
preferences: {}
users:
- name: prod-admin
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
`

func kubeconfigSecret(text string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "prod-kubeconfig", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "prod"}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{KubeconfigSecretKey: []byte(text)},
	}
}

// at replaces E1's URL with E2's in a fixture, for expected outputs.
func at(text string) string {
	return strings.ReplaceAll(text, "https://10.0.0.10:6443", "https://api.prod.example.com:443")
}
