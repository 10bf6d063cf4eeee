package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServingCertChecker tells whether a member's API server presents a certificate that verifies
// as serverName against the cluster CA: what `kubeadm join` checks when it fetches cluster-info
// a second time through the new endpoint, and any client dialing the new endpoint does.
type ServingCertChecker interface {
	Verify(ctx context.Context, address, serverName string, roots *x509.CertPool) error
}

// tlsCertChecker makes the TLS handshake itself (no HTTP request is sent).
type tlsCertChecker struct {
	timeout time.Duration
}

// servingCertTimeout bounds one member's handshake.
const servingCertTimeout = 3 * time.Second

func (c tlsCertChecker) Verify(ctx context.Context, address, serverName string, roots *x509.CertPool) error {
	d := tls.Dialer{Config: &tls.Config{ServerName: serverName, RootCAs: roots, MinVersion: tls.VersionTLS12}}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return err
	}
	return conn.Close()
}

func (r *LoadBalancerReconciler) servingCerts() ServingCertChecker {
	if r.ServingCerts != nil {
		return r.ServingCerts
	}
	return tlsCertChecker{timeout: servingCertTimeout}
}

// clusterCA reads the cluster CA from CAPI's <cluster>-ca Secret (key tls.crt), the CA
// kubeadm signed the API servers' certificates with.
func (r *LoadBalancerReconciler) clusterCA(ctx context.Context, ns, cluster string) (*x509.CertPool, error) {
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster + "-ca"}, s); err != nil {
		return nil, fmt.Errorf("reading the cluster CA Secret %s/%s-ca: %w", ns, cluster, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data[corev1.TLSCertKey]) {
		return nil, fmt.Errorf("the cluster CA Secret %s/%s-ca has no PEM certificate in %s", ns, cluster, corev1.TLSCertKey)
	}
	return pool, nil
}
