package endpointmove

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestRewriteClusterInfo(t *testing.T) {
	tests := []struct {
		name        string
		cm          func() *corev1.ConfigMap
		wantChanged bool
		wantErr     string
		check       func(g Gomega, cm *corev1.ConfigMap)
	}{
		{"at E1: rewritten, stale signatures dropped", clusterInfo, true, "", func(g Gomega, cm *corev1.ConfigMap) {
			g.Expect(cm.Data).To(Equal(map[string]string{ClusterInfoKubeconfigKey: at(clusterInfoKubeconfig)}))
			g.Expect(cm.ResourceVersion).To(Equal("412"), "the caller's optimistic lock needs the read version")
		}},
		{"at E2 and signed again: no-op, signatures kept", func() *corev1.ConfigMap {
			cm := clusterInfo()
			cm.Data[ClusterInfoKubeconfigKey] = at(clusterInfoKubeconfig)
			return cm
		}, false, "", func(g Gomega, cm *corev1.ConfigMap) {
			g.Expect(cm.Data).To(HaveKey("jws-kubeconfig-abcdef"))
		}},
		{"another server: refused", func() *corev1.ConfigMap {
			cm := clusterInfo()
			cm.Data[ClusterInfoKubeconfigKey] = strings.ReplaceAll(clusterInfoKubeconfig, "10.0.0.10", "10.0.0.99")
			return cm
		}, false, `server "https://10.0.0.99:6443", which names neither the old nor the new endpoint`, nil},
		{"no kubeconfig key", func() *corev1.ConfigMap {
			cm := clusterInfo()
			delete(cm.Data, ClusterInfoKubeconfigKey)
			return cm
		}, false, `has no "kubeconfig" key`, nil},
		{"not YAML", func() *corev1.ConfigMap {
			cm := clusterInfo()
			cm.Data[ClusterInfoKubeconfigKey] = "clusters: [unclosed"
			return cm
		}, false, "parsing the kubeconfig", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cm := tt.cm()
			before := cm.DeepCopy()
			changed, err := testMove.RewriteClusterInfo(cm)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(cm).To(Equal(before), "an error leaves the object as it was")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(changed).To(Equal(tt.wantChanged))
			if !changed {
				g.Expect(cm).To(Equal(before))
			}
			if tt.check != nil {
				tt.check(g, cm)
			}
			assertIdempotent(g, cm, testMove.RewriteClusterInfo)
		})
	}
}

func TestRewriteKubeProxy(t *testing.T) {
	g := NewWithT(t)
	cm := kubeProxy()
	changed, err := testMove.RewriteKubeProxy(cm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	want := kubeProxy()
	want.Data[KubeProxyKubeconfigKey] = at(kubeProxyKubeconfig)
	g.Expect(cm).To(Equal(want), "only the server changes, byte for byte; config.conf and the labels stay")
	assertIdempotent(g, cm, testMove.RewriteKubeProxy)

	other := kubeProxy()
	other.Data[KubeProxyKubeconfigKey] = strings.ReplaceAll(kubeProxyKubeconfig, "10.0.0.10:6443", "10.0.0.10:7443")
	_, err = testMove.RewriteKubeProxy(other)
	g.Expect(errors.Is(err, ErrForeignEndpoint)).To(BeTrue(), "same host, other port is not E1: %v", err)
}

func TestRewriteKubeconfigSecret(t *testing.T) {
	// A user's extra entry for another cluster, and a JSON kubeconfig with quoted servers.
	extra := secretKubeconfig + `# an entry a user added
`
	extra = strings.Replace(extra, "  name: prod\n", "  name: prod\n- cluster:\n    server: https://other.example.com:6443\n  name: other\n", 1)
	json := `{"apiVersion":"v1","kind":"Config","clusters":[{"name":"prod","cluster":{"server":"https://10.0.0.10:6443"}},` +
		`{"name":"prod-2","cluster":{"server":"https://10.0.0.10:6443"}}],"users":[]}`
	tests := []struct {
		name, in, want string
		changed        bool
		wantErr        string
	}{
		{"CAPI's kubeconfig", secretKubeconfig, at(secretKubeconfig), true, ""},
		{"an entry for another server stays", extra, at(extra), true, ""},
		{"JSON with two entries at E1", json, at(json), true, ""},
		{"already at E2", at(secretKubeconfig), at(secretKubeconfig), false, ""},
		{"no entry at E1 or E2", strings.ReplaceAll(secretKubeconfig, "10.0.0.10", "10.9.9.9"), "", false, ErrForeignEndpoint.Error()},
		// Found by the lab: the server moved, the name clients verify it as did not.
		{"tls-server-name of E1's host follows", withTLSName(secretKubeconfig, "10.0.0.10"),
			strings.Replace(at(withTLSName(secretKubeconfig, "10.0.0.10")), "tls-server-name: 10.0.0.10", "tls-server-name: api.prod.example.com", 1), true, ""},
		{"another tls-server-name stays", withTLSName(secretKubeconfig, "kubernetes"), at(withTLSName(secretKubeconfig, "kubernetes")), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := kubeconfigSecret(tt.in)
			changed, err := testMove.RewriteKubeconfigSecret(s)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(changed).To(Equal(tt.changed))
			g.Expect(string(s.Data[KubeconfigSecretKey])).To(Equal(tt.want))
			g.Expect(s.Labels).To(HaveKeyWithValue("cluster.x-k8s.io/cluster-name", "prod"))
			assertIdempotent(g, s, testMove.RewriteKubeconfigSecret)
		})
	}
}

func TestRewriteKubeadmConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		changed bool
		wantErr string
		check   func(g Gomega, out string)
	}{
		{"kubeadm v1.36's document", clusterConfiguration, true, "", func(g Gomega, out string) {
			g.Expect(out).To(ContainSubstring("controlPlaneEndpoint: api.prod.example.com:443\n"))
			g.Expect(out).To(ContainSubstring("certSANs:\n    - 127.0.0.1\n    - localhost\n    - 10.0.0.10\n"))
			g.Expect(out).To(ContainSubstring("SomeFutureGate: true"), "fields this build does not know survive")
			g.Expect(out).To(ContainSubstring("value: Node,RBAC"))
			g.Expect(strings.Index(out, "apiVersion:")).To(BeNumerically("<", strings.Index(out, "kind:")), "key order stays")
		}},
		{"no apiServer at all", strings.Replace(clusterConfiguration,
			"apiServer:\n  certSANs:\n  - 127.0.0.1\n  - localhost\n  extraArgs:\n  - name: authorization-mode\n    value: Node,RBAC\n", "", 1),
			true, "", func(g Gomega, out string) {
				g.Expect(out).To(ContainSubstring("apiServer:\n  certSANs:\n    - 10.0.0.10\n"))
			}},
		{"empty apiServer", strings.Replace(clusterConfiguration,
			"apiServer:\n  certSANs:\n  - 127.0.0.1\n  - localhost\n  extraArgs:\n  - name: authorization-mode\n    value: Node,RBAC\n", "apiServer: {}\n", 1),
			true, "", func(g Gomega, out string) {
				g.Expect(out).To(ContainSubstring("apiServer:\n  certSANs:\n    - 10.0.0.10\n"))
			}},
		{"endpoint without a port", strings.Replace(clusterConfiguration, "10.0.0.10:6443", "10.0.0.10", 1), true, "", func(g Gomega, out string) {
			g.Expect(out).To(ContainSubstring("controlPlaneEndpoint: api.prod.example.com:443\n"))
		}},
		{"moved, E1 kept", strings.Replace(strings.Replace(clusterConfiguration, "10.0.0.10:6443", "api.prod.example.com:443", 1),
			"  - localhost\n", "  - localhost\n  - 10.0.0.10\n", 1), false, "", nil},
		{"moved, but E1 lost from certSANs (KCP rewrote apiServer)", strings.Replace(clusterConfiguration, "10.0.0.10:6443", "api.prod.example.com:443", 1),
			true, "", func(g Gomega, out string) { g.Expect(out).To(ContainSubstring("- 10.0.0.10\n")) }},
		{"another endpoint", strings.Replace(clusterConfiguration, "10.0.0.10:6443", "10.0.0.99:6443", 1), false, `controlPlaneEndpoint "10.0.0.99:6443"`, nil},
		{"no endpoint", strings.Replace(clusterConfiguration, "controlPlaneEndpoint: 10.0.0.10:6443\n", "", 1), false, "no controlPlaneEndpoint", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cm := kubeadmConfig(tt.in)
			changed, err := testMove.RewriteKubeadmConfig(cm)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(errors.Is(err, ErrForeignEndpoint)).To(BeTrue())
				g.Expect(cm.Data[ClusterConfigurationKey]).To(Equal(tt.in))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(changed).To(Equal(tt.changed))
			if !changed {
				g.Expect(cm.Data[ClusterConfigurationKey]).To(Equal(tt.in))
			}
			if tt.check != nil {
				tt.check(g, cm.Data[ClusterConfigurationKey])
			}
			assertIdempotent(g, cm, testMove.RewriteKubeadmConfig)
		})
	}
}

func TestMoveClassifies(t *testing.T) {
	g := NewWithT(t)
	m := Move{Old: testMove.Old, New: testMove.New}
	g.Expect(m.classifyServer("https://API.prod.example.com")).To(Equal(atNew), "443 implied, names compare without case")
	g.Expect(m.classifyServer("https://10.0.0.10:6443/")).To(Equal(atOld))
	g.Expect(m.classifyServer("10.0.0.10:6443")).To(Equal(foreign), "not a URL")
	v6 := Move{Old: testMove.Old, New: testMove.New}
	v6.Old.Host = "fd00::10"
	g.Expect(v6.classifyServer("https://[fd00:0::10]:6443")).To(Equal(atOld))
	g.Expect(v6.classifyHostPort("[fd00::10]:6443")).To(Equal(atOld))
	g.Expect(Move{Old: testMove.Old, New: testMove.Old}.Valid()).To(MatchError(ContainSubstring("the same")))
	g.Expect(Move{Old: testMove.Old}.Valid()).To(MatchError(ContainSubstring("need a host and a port")))
	g.Expect(testMove.Valid()).To(Succeed())
}

// assertIdempotent calls rewrite again on its own output: no change, and it says so.
func assertIdempotent[T runtime.Object](g Gomega, obj T, rewrite func(T) (bool, error)) {
	before := obj.DeepCopyObject()
	changed, err := rewrite(obj)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "a second call must be a no-op")
	g.Expect(equality.Semantic.DeepEqual(before, obj)).To(BeTrue(), "a no-op must not touch the object")
}

// withTLSName adds tls-server-name to the kubeconfig's first cluster entry.
func withTLSName(kc, name string) string {
	return strings.Replace(kc, "    server: ", "    tls-server-name: "+name+"\n    server: ", 1)
}
