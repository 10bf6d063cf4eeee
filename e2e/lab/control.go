package lab

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// UnixHTTPClient talks HTTP over the unix socket at path (the agent's
// control socket); the URL's host is ignored.
func UnixHTTPClient(path string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}
}

// WriteGossipKey writes a fresh 32-byte gossip key (base64) to path, mode
// 0600, as the manager's Secret and the bootstrap write it on a node.
func WriteGossipKey(path string) (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("lab gossip key: %w", err)
	}
	return path, nil
}
