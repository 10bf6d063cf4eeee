//go:build linux

package wglab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Client is the public-side client: HTTPS with the cluster CA and the name "kubernetes", trying
// the gateways in order (as a client does with several DNS records).
type Client struct {
	HTTP *http.Client
	w    *Lab
}

// NewClient makes a client for the given gateways (default: all, in order); dialTimeout bounds
// each attempt on one gateway, timeout the whole request.
func (w *Lab) NewClient(dialTimeout, timeout time.Duration, gws ...*Gateway) *Client {
	if len(gws) == 0 {
		gws = w.Gateways
	}
	addrs := make([]string, 0, len(gws))
	for _, g := range gws {
		addrs = append(addrs, net.JoinHostPort(g.Addr.String(), fmt.Sprint(APIPort)))
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var errs []error
		for _, a := range addrs {
			dctx, cancel := context.WithTimeout(ctx, dialTimeout)
			c, err := w.Client.DialContext(dctx, "tcp", a)
			cancel()
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	return &Client{w: w, HTTP: &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: dial, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: w.roots, ServerName: "kubernetes"},
	}}}
}

// Name fetches /name: which member answered.
func (c *Client) Name(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api/name", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

// HTTPSClient is a client from the client namespace to one address, verifying the cluster CA
// and the name "kubernetes"; keepAlive reuses connections.
func (w *Lab) HTTPSClient(addr string, keepAlive bool, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return w.Client.DialContext(ctx, "tcp", addr)
		},
		DisableKeepAlives: !keepAlive,
		TLSClientConfig:   &tls.Config{RootCAs: w.roots, ServerName: "kubernetes"},
	}}
}
