//go:build linux

package lab

import (
	"errors"
	"io"
	"net"
	"sync"
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
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			go forward(c, target)
		}
	}()
	return p, nil
}

func forward(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
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
