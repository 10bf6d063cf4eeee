// Package endpointmove holds the pure parts of moving a Cluster's API endpoint from one
// LoadBalancer (E1) to another (E2), docs/endpoint-move.md: the rewrites of the objects a kubeadm
// cluster keeps its endpoint in, and the step machine that orders them. Nothing here does I/O;
// the LoadBalancer reconciler reads the objects, calls these functions and writes what changed.
//
// Every rewrite is idempotent: called again on its own output it reports changed=false and
// leaves the object as it is, so a manager restarted between a write and the status that
// records it does the step again without writing twice.
package endpointmove

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Move names the two endpoints of a move.
type Move struct {
	// Old is E1, the endpoint the Cluster has when the move starts.
	Old lbv1.APIEndpoint
	// New is E2, the taking-over LoadBalancer's endpoint.
	New lbv1.APIEndpoint
}

// ErrForeignEndpoint says an object names neither E1 nor E2: somebody else put another
// endpoint there, and the move must not guess which one wins.
var ErrForeignEndpoint = errors.New("names neither the old nor the new endpoint")

// which tells whether a server URL or host:port points at E1, at E2 or elsewhere.
type which int

const (
	foreign which = iota
	atOld
	atNew
)

// classifyServer classifies a kubeconfig server URL. A URL without a port means 443 for https,
// as client-go dials it.
func (m Move) classifyServer(server string) which {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return foreign
	}
	port := u.Port()
	if port == "" && u.Scheme == "https" {
		port = "443"
	}
	return m.classify(u.Hostname(), port)
}

// classifyHostPort classifies kubeadm's controlPlaneEndpoint ("host:port", or a bare host,
// which kubeadm completes with the API server's bind port: only the host can be compared).
func (m Move) classifyHostPort(hp string) which {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		host, port = strings.Trim(hp, "[]"), ""
	}
	return m.classify(host, port)
}

func (m Move) classify(host, port string) which {
	match := func(e lbv1.APIEndpoint) bool {
		return sameHost(host, e.Host) && (port == "" || port == strconv.Itoa(int(e.Port)))
	}
	switch {
	case match(m.New):
		return atNew
	case match(m.Old):
		return atOld
	}
	return foreign
}

// sameHost compares IP addresses by value (fd00::1 and fd00:0::1 are one) and names without
// regard to case.
func sameHost(a, b string) bool {
	if x, err := netip.ParseAddr(a); err == nil {
		y, err := netip.ParseAddr(b)
		return err == nil && x == y
	}
	return strings.EqualFold(a, b)
}

// newServer returns server with its host and port replaced by E2's, keeping scheme and path.
func (m Move) newServer(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("parsing server %q: %w", server, err)
	}
	u.Host = m.newHostPort()
	return u.String(), nil
}

func (m Move) newHostPort() string {
	return net.JoinHostPort(m.New.Host, strconv.Itoa(int(m.New.Port)))
}

// Valid reports whether both endpoints are complete and differ.
func (m Move) Valid() error {
	if !m.Old.IsValid() || !m.New.IsValid() {
		return fmt.Errorf("both endpoints need a host and a port (old %s:%d, new %s:%d)", m.Old.Host, m.Old.Port, m.New.Host, m.New.Port)
	}
	if sameHost(m.Old.Host, m.New.Host) && m.Old.Port == m.New.Port {
		return fmt.Errorf("the old and the new endpoint are the same, %s:%d", m.New.Host, m.New.Port)
	}
	return nil
}
