//go:build linux

package kubeadm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"
)

// JoinConfigPath is where CAPI's kubeadm bootstrap writes a joining machine's configuration.
const JoinConfigPath = "/run/kubeadm/kubeadm-join-config.yaml"

// Discovery is how a joining machine finds the cluster, as CAPI's kubeadm bootstrap writes
// JoinConfiguration.discovery.bootstrapToken: the Cluster's endpoint, a bootstrap token and the
// pin of the cluster CA's public key.
type Discovery struct {
	// Endpoint is host:port, the Cluster's controlPlaneEndpoint when the machine is made.
	Endpoint   string
	Token      string
	CACertHash string
	// Timeout is JoinConfiguration.timeouts.discovery (zero: kubeadm's 5 minutes): how long
	// kubeadm retries fetching a signed, verifiable cluster-info.
	Timeout time.Duration
}

// NewBootstrapToken makes a token of kubeadm's form ([a-z0-9]{6}.[a-z0-9]{16}).
func NewBootstrapToken() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[n.Int64()]
	}
	return string(b[:6]) + "." + string(b[6:]), nil
}

// CACertHash is kubeadm's pin of a CA certificate (--discovery-token-ca-cert-hash): "sha256:"
// and the hex SHA-256 of its SubjectPublicKeyInfo.
func CACertHash(caPEM []byte) (string, error) {
	b, _ := pem.Decode(caPEM)
	if b == nil {
		return "", errors.New("CA certificate: no PEM block")
	}
	crt, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("CA certificate: %w", err)
	}
	sum := sha256.Sum256(crt.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// JoinDiscovered is Join through kubeadm's own discovery, as `kubeadm join --control-plane`
// does it: with the shared keys written (as KCP's bootstrap writes them), each of `kubeadm join
// phase control-plane-prepare certs`, `kubeconfig` and `control-plane` fetches
// kube-public/cluster-info from d.Endpoint without trusting it, verifies the bootstrap signer's
// JWS for the token and the CA pin, fetches it again over TLS verified against that CA for the
// server cluster-info names, and reads kubeadm-config and kubelet-config from there with the
// token's credentials. The certificates, kubeconfigs and API server manifest are made from the
// cluster's uploaded ClusterConfiguration (its controlPlaneEndpoint and certSANs), not from
// anything the lab wrote. A stale cluster-info (unsigned, or naming a server whose certificate
// does not carry it) fails here as it fails a real join.
//
// etcd is the lab's part: without mirror Pods kubeadm cannot find the etcd members through the
// API server, so the member is added by the caller (Etcd.AddLearner) and its manifest written
// by `kubeadm init phase etcd local` with the members listed, as Join does; so is the kubelet's
// kubeconfig (a real join gets it by TLS bootstrap, which needs a kubelet).
func (c Cluster) JoinDiscovered(ctx context.Context, m Machine, on Runner, shared map[string][]byte, members []EtcdMember, d Discovery) error {
	if d.Endpoint == "" || d.Token == "" || d.CACertHash == "" {
		return errors.New("kubeadm join discovery: Endpoint, Token and CACertHash are required")
	}
	if err := writeShared(m, shared); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
nodeRegistration:
  name: %[1]s
  criSocket: unix:///var/run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
discovery:
  bootstrapToken:
    apiServerEndpoint: %[2]q
    token: %[3]q
    caCertHashes: [%[4]q]
controlPlane:
  localAPIEndpoint:
    advertiseAddress: %[5]s
    bindPort: %[6]d
`, m.Name, d.Endpoint, d.Token, d.CACertHash, m.Addr, APIPort)
	if d.Timeout > 0 {
		cfg += fmt.Sprintf("timeouts:\n  discovery: %s\n", d.Timeout)
	}
	if err := writeFile(m.Path(JoinConfigPath), []byte(cfg), 0o600); err != nil {
		return err
	}
	return c.JoinWritten(ctx, m, on, members)
}

// JoinWritten is JoinDiscovered on a machine whose bootstrap wrote the JoinConfiguration
// (JoinConfigPath) and the shared keys itself, as CAPI's kubeadm bootstrap provider does: the
// discovery, node name and advertise address are the file's. etcd and the kubelet's
// kubeconfig are the lab's part, as in JoinDiscovered.
func (c Cluster) JoinWritten(ctx context.Context, m Machine, on Runner, members []EtcdMember) error {
	for _, p := range []string{"certs", "kubeconfig", "control-plane"} {
		args := []string{c.Kubeadm, "join", "phase", "control-plane-prepare", p, "--config", JoinConfigPath, "--rootfs", m.Root}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, err := on.Run(pctx, args...)
		cancel()
		if err != nil {
			return fmt.Errorf("kubeadm join phase control-plane-prepare %s on %s: %w: %s", p, m.Name, err, lastLines(out, 5))
		}
	}
	if err := c.writeConfig(m, append(append([]EtcdMember(nil), members...), EtcdMember{m.Name, m.PeerURL()})); err != nil {
		return err
	}
	return c.phases(ctx, m, on, "kubeconfig kubelet", "etcd local")
}

// ServerOf is the server a kubeconfig file on m names (its first cluster's).
func ServerOf(m Machine, path string) (string, error) {
	b, err := os.ReadFile(m.Path(path))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "server: "); ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("%s on %s names no server", path, m.Name)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
