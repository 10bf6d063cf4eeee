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
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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

// SetEndpoints replaces the client URLs the client balances over (machines came or went).
func (e *Etcd) SetEndpoints(endpoints ...string) { e.c.SetEndpoints(endpoints...) }

// Leader is the ID of the member that leads, as the first endpoint that answers sees it.
func (e *Etcd) Leader(ctx context.Context) (uint64, error) {
	last := errors.New("no endpoints")
	for _, ep := range e.c.Endpoints() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := e.c.Status(cctx, ep)
		cancel()
		if err == nil {
			return st.Leader, nil
		}
		last = err
	}
	return 0, fmt.Errorf("etcd status: %w", last)
}

// AddLearner adds m as a learner (a non-voting member), as `kubeadm join` does before it starts
// the machine's etcd. It returns the members to list in m's initial-cluster (the voters and m).
// etcd refuses a change it cannot prove safe yet ("unhealthy cluster", right after a promotion
// or a leadership change); kubeadm retries, and so does AddLearner, for up to a minute.
func (e *Etcd) AddLearner(ctx context.Context, m Machine) (uint64, []EtcdMember, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var resp *clientv3.MemberAddResponse
	err := retryRefusals(ctx, func() (err error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err = e.c.MemberAddAsLearner(cctx, []string{m.PeerURL()})
		return err
	})
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

// Remove removes m's member as KubeadmControlPlane does in a Machine's pre-terminate step, once
// caplb's pre-drain hook was released and the node drained: leadership first moves to another
// voter if m leads (so the cluster does not wait out an election), then the member goes, with
// etcd's "unhealthy cluster" refusals retried as KCP requeues. A member already gone is not an
// error.
func (e *Etcd) Remove(ctx context.Context, m Machine) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := e.c.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("etcd member list: %w", err)
	}
	var leaving *etcdserverpb.Member
	for _, mm := range resp.Members {
		if mm.Name == m.Name || slices.Contains(mm.PeerURLs, m.PeerURL()) {
			leaving = mm
		}
	}
	if leaving == nil {
		return nil
	}
	if err := e.moveLeadership(ctx, leaving, resp.Members); err != nil {
		return err
	}
	err = retryRefusals(ctx, func() error {
		_, err := e.c.MemberRemove(ctx, leaving.ID)
		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("removing etcd member %s: %w", m.Name, err)
	}
	return nil
}

// moveLeadership moves leadership off leaving if it leads. MoveLeader must reach the leader.
func (e *Etcd) moveLeadership(ctx context.Context, leaving *etcdserverpb.Member, members []*etcdserverpb.Member) error {
	if len(leaving.ClientURLs) == 0 {
		return nil
	}
	// A dead member (a machine killed and being replaced) never answers: the client's retries
	// must not eat the removal's minute.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := e.c.Status(sctx, leaving.ClientURLs[0])
	cancel()
	if err != nil || st.Leader != leaving.ID {
		return nil // unreachable (already gone) or not the leader: nothing to move
	}
	var to uint64
	for _, mm := range members {
		if mm.ID != leaving.ID && !mm.IsLearner {
			to = mm.ID
			break
		}
	}
	if to == 0 {
		return nil // the last voter: nothing to move to
	}
	saved := e.c.Endpoints()
	e.c.SetEndpoints(leaving.ClientURLs[0])
	defer e.c.SetEndpoints(saved...)
	// The balancer switches endpoints asynchronously: a call that still reaches a follower is
	// refused (not the leader) and retried.
	for {
		if _, err = e.c.MoveLeader(ctx, to); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("moving etcd leadership from %s: %w", leaving.Name, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// retryRefusals calls fn until it succeeds, fails for another reason than a refusal that passes
// once etcd settles, or ctx ends.
func retryRefusals(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func retryable(err error) bool {
	for _, t := range []error{rpctypes.ErrUnhealthy, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged,
		rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
