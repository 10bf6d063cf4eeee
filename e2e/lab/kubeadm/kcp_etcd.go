//go:build linux

package kubeadm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kcpetcd "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/etcd"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy"
)

// KCPEtcdClient is KubeadmControlPlane's own etcd client for the member on node: KCP's
// port-forward dialer (sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/proxy) through the
// workload API server cfg names — the cluster's endpoint — to kube-system/etcd-<node>:2379, a
// client certificate made from the cluster's etcd CA (caPEM, keyPEM: the <cluster>-etcd Secret)
// as KCP makes one, and KCP's check of etcd's serving certificate (chained to the etcd CA; the
// pod's name is no SAN). It needs the node's kubelet to serve port-forward (KubeletAPI) and its
// etcd mirror Pod (NodeReporter).
func KCPEtcdClient(ctx context.Context, cfg *rest.Config, caPEM, keyPEM []byte, node string) (*kcpetcd.Client, error) {
	cert, err := SignedClientCert(caPEM, keyPEM, "cluster-api.x-k8s.io")
	if err != nil {
		return nil, fmt.Errorf("KCP's etcd client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("KCP's etcd client: no etcd CA certificate")
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection, as KCP does
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("etcd presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}}
	return kcpetcd.NewClient(ctx, kcpetcd.ClientConfiguration{Endpoint: "etcd-" + node,
		Proxy:     proxy.Proxy{Kind: "pods", Namespace: metav1.NamespaceSystem, KubeConfig: rest.CopyConfig(cfg), Port: EtcdClientPort},
		TLSConfig: tlsCfg, DialTimeout: 10 * time.Second, CallTimeout: 15 * time.Second})
}

// SignedClientCert is a client certificate for cn (and orgs), valid for an hour, signed by the
// CA in caPEM/keyPEM.
func SignedClientCert(caPEM, keyPEM []byte, cn string, orgs ...string) (tls.Certificate, error) {
	caBlock, _ := pem.Decode(caPEM)
	if caBlock == nil {
		return tls.Certificate{}, errors.New("no PEM CA certificate")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	caKeyPair, err := tls.X509KeyPair(caPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKeyPair.PrivateKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
