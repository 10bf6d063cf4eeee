package wireguard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const renderedGateway = `name: gw-1
listen: ":7443"
wireguard:
  listenPort: 51820
  privateKeyFile: /var/lib/caplb/wireguard/ns/c/gateway.key
registration:
  listen: ":51821"
  tokenFile: /var/lib/caplb/wireguard/ns/c/join-token
stateFile: /var/lib/caplb/wireguard/ns/c/gateway-state.json
health:
  caFile: /var/lib/caplb/wireguard/ns/c/ca.crt
admin:
  listen: 127.0.0.1:51820
`

// A gateway run from the Secret: it waits for its configuration and the Cluster's CA, keeps
// every file in its own directory with mode 0600 (the rendered paths are rewritten there), and
// starts from that cached copy when the management cluster cannot be reached.
func TestSecretSyncLoadsCachesAndSurvivesAnUnreachableAPI(t *testing.T) {
	g := NewWithT(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-caplb-gateway"},
		Data: map[string][]byte{
			wgapi.SecretGatewayKey("gw-1"): []byte(renderedGateway),
			wgapi.SecretTokenKey:           []byte("0123456789abcdef0123456789abcdef"),
			wgapi.SecretQuiescedKey:        []byte(`["n2"]`),
		}}
	cs := fake.NewClientset(sec)
	dir := t.TempDir()
	s := &SecretSync{Client: clientsetAPI{cs}, Namespace: "ns", Secret: "c-caplb-gateway", Gateway: "gw-1", Dir: dir,
		Interval: 10 * time.Millisecond, Log: testr.New(t)}

	// No CA yet: Load keeps waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := s.Load(ctx)
	cancel()
	g.Expect(err).To(MatchError(context.DeadlineExceeded))

	sec.Data[wgapi.SecretCAKey] = []byte("-----BEGIN CERTIFICATE-----\n")
	_, err = cs.CoreV1().Secrets("ns").Update(context.Background(), sec, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := s.Load(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Name).To(Equal("gw-1"))
	g.Expect(cfg.Listen).To(Equal(":7443"))
	g.Expect(cfg.Registration.TokenFile).To(Equal(filepath.Join(dir, wgapi.SecretTokenKey)))
	g.Expect(cfg.Health.CAFile).To(Equal(filepath.Join(dir, wgapi.SecretCAKey)))
	g.Expect(cfg.WireGuard.PrivateKeyFile).To(Equal(filepath.Join(dir, "gateway.key")))
	g.Expect(cfg.StateFile).To(Equal(filepath.Join(dir, "gateway-state.json")))
	for _, f := range []string{"gateway.yaml", wgapi.SecretTokenKey, wgapi.SecretCAKey} {
		st, err := os.Stat(filepath.Join(dir, f))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o600)), f)
	}
	tok, err := LoadToken(cfg.Registration.TokenFile)
	g.Expect(err).NotTo(HaveOccurred(), "the gateway accepts the token file as written")
	g.Expect(string(tok)).To(Equal("0123456789abcdef0123456789abcdef"))

	// The management cluster away: the cached configuration serves.
	cs.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	cfg2, err := s.Load(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg2).To(Equal(cfg))
}

// A Secret without this gateway's key says which name to check.
func TestSecretSyncUnknownGateway(t *testing.T) {
	g := NewWithT(t)
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-caplb-gateway"},
		Data: map[string][]byte{wgapi.SecretGatewayKey("gw-1"): []byte(renderedGateway)}})
	s := &SecretSync{Client: clientsetAPI{cs}, Namespace: "ns", Secret: "c-caplb-gateway", Gateway: "gw-9", Dir: t.TempDir(), Log: testr.New(t)}
	_, _, err := s.fetch(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring(`is "gw-9" listed in the LoadBalancer's spec.backend.wireguard.gateways`)))
}

// clientsetAPI adapts a (fake) clientset to ManagementAPI.
type clientsetAPI struct{ cs kubernetes.Interface }

func (a clientsetAPI) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return a.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a clientsetAPI) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return a.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a clientsetAPI) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	_, err := a.cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	return err
}

func (a clientsetAPI) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	_, err := a.cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
