package v1alpha1

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
)

// errs collects field errors; each names its field and the fix.
type errs []error

func (e *errs) bad(field, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
}

// Validate checks the configuration without I/O.
func (c *GatewayConfig) Validate() error {
	var e errs
	if c.APIVersion != APIVersion || c.Kind != GatewayKind {
		e.bad("apiVersion", "%q kind %q is not a gateway configuration; start the file with apiVersion: %s and kind: %s", c.APIVersion, c.Kind, APIVersion, GatewayKind)
	}
	if c.Name == "" {
		e.bad("name", "is empty and the hostname is unknown; set name")
	}
	hostPort(&e, "listen", c.Listen, false)
	w := c.WireGuard
	port(&e, "wireguard.listenPort", w.ListenPort)
	if w.PrivateKeyFile == "" {
		e.bad("wireguard.privateKeyFile", "is empty; give a path (created with mode 0600 when missing)")
	}
	if _, err := ParseTunnelPrefix(w.TunnelPrefix); err != nil {
		e.bad("wireguard.tunnelPrefix", "%v", err)
	}
	mtu(&e, "wireguard.mtu", w.MTU)
	tunnelDevice(&e, "wireguard.", w.Device, w.DeviceName)
	if c.Registration.Listen != "0" {
		hostPort(&e, "registration.listen", c.Registration.Listen, false)
		if c.Registration.TokenFile == "" {
			e.bad("registration.tokenFile", "is empty; give the cluster's join token file (mode 0600), or set registration.listen: \"0\" and list peers")
		}
	} else if len(c.Peers) == 0 {
		e.bad("peers", "is empty while registration is disabled; no member could ever join")
	}
	if c.StateFile == "" {
		e.bad("stateFile", "is empty; give a path the gateway may write")
	}
	port(&e, "memberPort", c.MemberPort)
	h := c.Health
	if len(h.Path) == 0 || h.Path[0] != '/' {
		e.bad("health.path", "%q must start with /", h.Path)
	}
	if h.ServerName == "" {
		e.bad("health.serverName", "is empty; use a name the API server certificate carries, e.g. kubernetes")
	}
	if h.CAFile == "" && !h.InsecureSkipVerify {
		e.bad("health.caFile", "is empty; give the cluster CA (e.g. /etc/kubernetes/pki/ca.crt) or set health.insecureSkipVerify: true")
	}
	if h.CAFile != "" && h.InsecureSkipVerify {
		e.bad("health.insecureSkipVerify", "is set together with health.caFile; choose one")
	}
	positive(&e, "health.interval", h.Interval)
	positive(&e, "health.timeout", h.Timeout)
	atLeast1(&e, "health.rise", h.Rise)
	atLeast1(&e, "health.fall", h.Fall)
	positive(&e, "dialTimeout", c.DialTimeout)
	positive(&e, "hedgeDelay", c.HedgeDelay)
	if c.HedgeDelay.Duration > c.DialTimeout.Duration {
		e.bad("hedgeDelay", "%v is longer than dialTimeout (%v); a hedge must start before the dial gives up", c.HedgeDelay.Duration, c.DialTimeout.Duration)
	}
	maxProcs(&e, c.MaxProcs)
	positive(&e, "drainTimeout", c.DrainTimeout)
	if c.ForgetAfter.Duration < time.Minute {
		e.bad("forgetAfter", "%v is shorter than 1m; a member that misses a few registrations would be dropped", c.ForgetAfter.Duration)
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for i, p := range c.Peers {
		f := fmt.Sprintf("peers[%d]", i)
		if p.Name == "" {
			e.bad(f+".name", "is empty; use the member's node name")
		} else if names[p.Name] {
			e.bad(f+".name", "%q is listed twice", p.Name)
		}
		names[p.Name] = true
		if _, err := ParseKey(p.PublicKey); err != nil {
			e.bad(f+".publicKey", "%v", err)
		} else if keys[p.PublicKey] {
			e.bad(f+".publicKey", "is listed twice")
		}
		keys[p.PublicKey] = true
	}
	if c.Admin.Listen != "0" {
		hostPort(&e, "admin.listen", c.Admin.Listen, true)
	}
	if c.Metrics.Listen != "" {
		hostPort(&e, "metrics.listen", c.Metrics.Listen, false)
	}
	return errors.Join(e...)
}

// Validate checks the configuration without I/O.
func (c *MemberConfig) Validate() error {
	var e errs
	if c.APIVersion != APIVersion || c.Kind != MemberKind {
		e.bad("apiVersion", "%q kind %q is not a member configuration; start the file with apiVersion: %s and kind: %s", c.APIVersion, c.Kind, APIVersion, MemberKind)
	}
	if c.NodeName == "" {
		e.bad("nodeName", "is empty and the hostname is unknown; set nodeName")
	}
	if c.PrivateKeyFile == "" {
		e.bad("privateKeyFile", "is empty; give a path on the node (created with mode 0600 when missing)")
	}
	if _, err := ParseTunnelPrefix(c.TunnelPrefix); err != nil {
		e.bad("tunnelPrefix", "%v", err)
	}
	if len(c.Gateways) == 0 {
		e.bad("gateways", "is empty; list every gateway's endpoint (host:port of its WireGuard UDP port)")
	}
	needToken := false
	seen := map[string]bool{}
	for i, g := range c.Gateways {
		f := fmt.Sprintf("gateways[%d]", i)
		hostPort(&e, f+".endpoint", g.Endpoint, true)
		if seen[g.Endpoint] {
			e.bad(f+".endpoint", "%q is listed twice", g.Endpoint)
		}
		seen[g.Endpoint] = true
		if g.PublicKey != "" {
			if _, err := ParseKey(g.PublicKey); err != nil {
				e.bad(f+".publicKey", "%v", err)
			}
		}
		if g.Registration != "0" {
			needToken = true
			hostPort(&e, f+".registration", g.Registration, true)
		} else if g.PublicKey == "" {
			e.bad(f+".publicKey", "is empty while registration is \"0\"; pin the gateway's key or let the member register")
		}
	}
	if needToken && c.TokenFile == "" {
		e.bad("tokenFile", "is empty; give the cluster's join token file (mode 0600), or pin every gateway's publicKey with registration: \"0\"")
	}
	positive(&e, "persistentKeepalive", c.PersistentKeepalive)
	if c.PersistentKeepalive.Duration%time.Second != 0 || c.PersistentKeepalive.Duration > 65535*time.Second {
		e.bad("persistentKeepalive", "%v: WireGuard counts whole seconds (1s-65535s)", c.PersistentKeepalive.Duration)
	}
	port(&e, "tunnelPort", c.TunnelPort)
	hostPort(&e, "upstream", c.Upstream, true)
	tunnelDevice(&e, "", c.Device, c.DeviceName)
	if _, up, err := net.SplitHostPort(c.Upstream); err == nil && c.Device == DeviceTUN && up != strconv.Itoa(c.TunnelPort) {
		e.bad("tunnelPort", "%d differs from upstream's port %s: with device tun the gateways' connections go straight to the API server, so tunnelPort must be its port (and the gateways' memberPort the same)", c.TunnelPort, up)
	}
	positive(&e, "registerInterval", c.RegisterInterval)
	positive(&e, "drainTimeout", c.DrainTimeout)
	mtu(&e, "mtu", c.MTU)
	maxProcs(&e, c.MaxProcs)
	if c.Admin.Listen != "0" {
		hostPort(&e, "admin.listen", c.Admin.Listen, true)
	}
	return errors.Join(e...)
}

func hostPort(e *errs, field, v string, needHost bool) {
	host, p, err := net.SplitHostPort(v)
	if err != nil {
		e.bad(field, "%q is not host:port", v)
		return
	}
	if needHost && host == "" {
		e.bad(field, "%q has no host", v)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		e.bad(field, "%q: port must be 1-65535", v)
	}
}

// tunnelDevice checks a tunnel device and its interface name (prefix: the fields' parent).
func tunnelDevice(e *errs, prefix, dev, name string) {
	switch dev {
	case DeviceNetstack:
		if name != "" {
			e.bad(prefix+"deviceName", "is set while %sdevice is netstack (no interface is made); remove it or set device: tun", prefix)
		}
	case DeviceTUN:
		if len(name) > 15 || strings.ContainsAny(name, "/: \t\n") || name == "." || name == ".." {
			e.bad(prefix+"deviceName", "%q is not an interface name; use at most 15 bytes, no '/', ':' or spaces", name)
		}
	default:
		e.bad(prefix+"device", "%q is unknown; use netstack (default) or tun", dev)
	}
}

func port(e *errs, field string, v int) {
	if v < 1 || v > 65535 {
		e.bad(field, "%d is out of range; use 1-65535", v)
	}
}

func mtu(e *errs, field string, v int) {
	if v < 1280 || v > 9000 {
		e.bad(field, "%d is out of range; use 1280-9000 (IPv6 needs at least 1280)", v)
	}
}

func positive(e *errs, field string, d agentv1.Duration) {
	if d.Duration <= 0 {
		e.bad(field, "%v must be positive", d.Duration)
	}
}

func atLeast1(e *errs, field string, v int) {
	if v < 1 {
		e.bad(field, "%d must be at least 1", v)
	}
}

func def(d *agentv1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

func maxProcs(e *errs, n int) {
	if n < -1 || n > 1024 {
		e.bad("maxProcs", "%d is out of range; give 1 to 1024 threads, or -1 for one per CPU", n)
	}
}
