//go:build linux

package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Dialer opens connections where the machines are (a lab namespace on their network).
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// Etcd is a client of the cluster's etcd with the API server's etcd client certificate, as
// kubeadm and KubeadmControlPlane use one to change membership.
type Etcd struct {
	c *clientv3.Client
}

// NewEtcd connects to the etcd members at endpoints (client URLs) with creds' certificates
// (a control-plane machine's apiserver-etcd-client and etcd CA), dialling through dial.
func NewEtcd(creds Machine, dial Dialer, endpoints ...string) (*Etcd, error) {
	tc, err := etcdTLS(creds)
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, TLS: tc, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})},
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return &Etcd{c: c}, nil
}

func etcdTLS(m Machine) (*tls.Config, error) {
	dir := m.Path(PKIDir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "apiserver-etcd-client.crt"), filepath.Join(dir, "apiserver-etcd-client.key"))
	if err != nil {
		return nil, fmt.Errorf("etcd client certificate of %s: %w", m.Name, err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "etcd", "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("etcd CA: no certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Close closes the client.
func (e *Etcd) Close() error { return e.c.Close() }

// Member is one etcd member as the cluster lists it.
type Member struct {
	ID      uint64
	Name    string
	PeerURL string
	Learner bool
}

// Members lists the cluster's members (a learner that has not started has no name yet).
func (e *Etcd) Members(ctx context.Context) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		mm := Member{ID: m.ID, Name: m.Name, Learner: m.IsLearner}
		if len(m.PeerURLs) > 0 {
			mm.PeerURL = m.PeerURLs[0]
		}
		out = append(out, mm)
	}
	return out, nil
}

// AddLearner adds m as a learner (a non-voting member), as `kubeadm join` does before it starts
// the machine's etcd. It returns the members to list in m's initial-cluster (the voters and m).
func (e *Etcd) AddLearner(ctx context.Context, m Machine) (uint64, []EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := e.c.MemberAddAsLearner(ctx, []string{m.PeerURL()})
	if err != nil {
		return 0, nil, fmt.Errorf("adding %s as an etcd learner: %w", m.Name, err)
	}
	var initial []EtcdMember
	for _, mm := range resp.Members {
		if mm.ID == resp.Member.ID || len(mm.PeerURLs) == 0 {
			continue
		}
		initial = append(initial, EtcdMember{Name: mm.Name, PeerURL: mm.PeerURLs[0]})
	}
	return resp.Member.ID, initial, nil
}

// Promote makes the learner id a voting member once it caught up with the leader, retrying
// while etcd says it has not (as kubeadm does) until ctx ends.
func (e *Etcd) Promote(ctx context.Context, id uint64) error {
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.c.MemberPromote(cctx, id)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("promoting etcd learner %x: %w (last: %v)", id, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Remove removes the member named name (or with m's peer URL), as KubeadmControlPlane does in
// a Machine's pre-terminate step, once caplb's pre-drain hook was released and the node drained.
// A member already gone is not an error.
func (e *Etcd) Remove(ctx context.Context, m Machine) error {
	members, err := e.Members(ctx)
	if err != nil {
		return err
	}
	for _, mm := range members {
		if mm.Name == m.Name || mm.PeerURL == m.PeerURL() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := e.c.MemberRemove(cctx, mm.ID); err != nil {
				return fmt.Errorf("removing etcd member %s: %w", m.Name, err)
			}
			return nil
		}
	}
	return nil
}
