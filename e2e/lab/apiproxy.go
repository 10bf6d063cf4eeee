//go:build linux

package lab

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// APIProxy makes a server of the test process (a test kube-apiserver on
// the host's loopback) reachable inside a node's namespace, on the node's
// own loopback: the kubelet's kubeconfig points there. Traffic stays on
// loopback on both sides.
type APIProxy struct {
	ln   net.Listener
	wg   sync.WaitGroup
	once sync.Once
}

// ProxyInto listens on listen (e.g. "127.0.0.1:16443") inside ns and
// forwards every connection to target (host:port in the test's namespace).
func ProxyInto(ns *Netns, listen, target string) (*APIProxy, error) {
	p := &APIProxy{}
	if err := ns.Do(func() error {
		ln, err := net.Listen("tcp", listen)
		p.ln = ln
		return err
	}); err != nil {
		return nil, err
	}
	var d net.Dialer
	p.serve(d.DialContext, target)
	return p, nil
}

// ProxyOut listens on listen in the test's namespace (e.g. "127.0.0.1:0") and forwards every
// connection to target dialled from inside ns: the management cluster's processes (CAPI's
// ClusterCache, the manager) reach a workload endpoint on the lab's network as they would
// through a router. Addr tells the port.
func ProxyOut(ns *Netns, listen, target string) (*APIProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &APIProxy{ln: ln}
	p.serve(ns.DialContext, target)
	return p, nil
}

// Addr is where the proxy listens.
func (p *APIProxy) Addr() string { return p.ln.Addr().String() }

func (p *APIProxy) serve(dial func(ctx context.Context, network, addr string) (net.Conn, error), target string) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			go Forward(c, dial, target)
		}
	}()
}

// Forward dials target with dial and splices c and that connection until both sides closed;
// it closes c.
func Forward(c net.Conn, dial func(ctx context.Context, network, addr string) (net.Conn, error), target string) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	u, err := dial(ctx, "tcp", target)
	cancel()
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(u, c)
	go cp(c, u)
	<-done
	<-done
}

// Close stops accepting; open connections end with their peers.
func (p *APIProxy) Close() error {
	var err error
	p.once.Do(func() {
		err = p.ln.Close()
		p.wg.Wait()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
	})
	return err
}
