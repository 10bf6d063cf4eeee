package controllers

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// A kubeconfig as a tenant writes it: one cluster, one user, inline credentials only.
func inlineKubeconfig() *clientcmdapi.Config {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tenant"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthorityData: []byte("ca-pem")}
	kc.AuthInfos["tenant"] = &clientcmdapi.AuthInfo{Token: "tenant-token", ClientCertificateData: []byte("crt"), ClientKeyData: []byte("key")}
	kc.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: "tenant"}
	kc.CurrentContext = "tenant"
	return kc
}

func TestCheckKubeconfig(t *testing.T) {
	const tokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	tests := []struct {
		name   string
		mutate func(kc *clientcmdapi.Config)
		reason string // "" means accepted
		field  string
	}{
		{"inline credentials", func(*clientcmdapi.Config) {}, "", ""},
		{"username and password, TLS server name", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["tenant"] = &clientcmdapi.AuthInfo{Username: "u", Password: "p"}
			kc.Clusters["tenant"].TLSServerName = "api.tenant"
		}, "", ""},
		{"tokenFile", func(kc *clientcmdapi.Config) { kc.AuthInfos["tenant"].TokenFile = tokenPath },
			lbv1.KubeconfigTokenFileReason, `users["tenant"].user.tokenFile`},
		{"client-certificate", func(kc *clientcmdapi.Config) { kc.AuthInfos["tenant"].ClientCertificate = "/etc/pki/tls.crt" },
			lbv1.KubeconfigClientCertificateFileReason, `users["tenant"].user.client-certificate`},
		{"client-key", func(kc *clientcmdapi.Config) { kc.AuthInfos["tenant"].ClientKey = "/etc/pki/tls.key" },
			lbv1.KubeconfigClientKeyFileReason, `users["tenant"].user.client-key`},
		{"certificate-authority", func(kc *clientcmdapi.Config) {
			kc.Clusters["tenant"].CertificateAuthority = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
		}, lbv1.KubeconfigCertificateAuthorityFileReason, `clusters["tenant"].cluster.certificate-authority`},
		{"exec", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["tenant"].Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
		}, lbv1.KubeconfigExecReason, `users["tenant"].user.exec`},
		{"auth-provider", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["tenant"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}, lbv1.KubeconfigAuthProviderReason, `users["tenant"].user.auth-provider`},
		{"proxy-url", func(kc *clientcmdapi.Config) { kc.Clusters["tenant"].ProxyURL = "socks5://10.0.0.9:1080" },
			lbv1.KubeconfigProxyURLReason, `clusters["tenant"].cluster.proxy-url`},
		{"a file in a user no context names", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["spare"] = &clientcmdapi.AuthInfo{TokenFile: tokenPath}
		}, lbv1.KubeconfigTokenFileReason, `users["spare"].user.tokenFile`},
		{"clusters are reported before users", func(kc *clientcmdapi.Config) {
			kc.AuthInfos["tenant"].TokenFile = tokenPath
			kc.Clusters["tenant"].ProxyURL = "http://10.0.0.9:3128"
		}, lbv1.KubeconfigProxyURLReason, `clusters["tenant"].cluster.proxy-url`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			kc := inlineKubeconfig()
			tt.mutate(kc)
			data, err := clientcmd.Write(*kc)
			g.Expect(err).NotTo(HaveOccurred())
			err = checkKubeconfig(data)
			if tt.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var r *kubeconfigRefusal
			g.Expect(errors.As(err, &r)).To(BeTrue(), "want a refusal, got %v", err)
			g.Expect(r.Reason).To(Equal(tt.reason))
			g.Expect(r.Field).To(Equal(tt.field))
			g.Expect(err.Error()).To(ContainSubstring(tt.field))
			// The message names fields, never the Secret's values.
			g.Expect(err.Error()).NotTo(Or(ContainSubstring("tenant-token"), ContainSubstring(tokenPath)))
		})
	}
}

// The YAML a tenant writes is judged as client-go decodes it, and a kubeconfig that does not
// parse is refused without quoting it.
func TestCheckKubeconfigRawYAML(t *testing.T) {
	tests := []struct {
		name, yaml, reason string
	}{
		{"tokenFile as written by hand", `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
users:
- name: u
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, lbv1.KubeconfigTokenFileReason},
		{"inline token", `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: Y2E=}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, ""},
		{"not a kubeconfig", "secret-token-value: [unterminated", lbv1.KubeconfigInvalidReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := checkKubeconfig([]byte(tt.yaml))
			if tt.reason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var r *kubeconfigRefusal
			g.Expect(errors.As(err, &r)).To(BeTrue(), "want a refusal, got %v", err)
			g.Expect(r.Reason).To(Equal(tt.reason))
			g.Expect(err.Error()).NotTo(ContainSubstring("secret-token-value"))
		})
	}
}
