package v1alpha1

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HealthTypes lists the supported health.type values, for messages.
var healthTypes = []string{HealthHTTPS, HealthHTTP, HealthTCP}

// defaults fills in the health check's zero values for an endpoint on port.
func (h *HealthConfig) defaults(port int) {
	if h.Type == "" {
		// An http:// URL was always fetched in plain HTTP: keep it so.
		h.Type = HealthHTTPS
		if u, err := url.Parse(h.URL); err == nil && u.Scheme == "http" {
			h.Type = HealthHTTP
		}
	}
	local := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	switch h.Type {
	case HealthHTTPS:
		if h.URL == "" {
			h.URL = "https://" + local + "/readyz"
		}
		if h.ServerName == "" {
			if u, err := url.Parse(h.URL); err == nil && u.Scheme == "https" {
				if _, err := netip.ParseAddr(u.Hostname()); err == nil {
					h.ServerName = DefaultHealthServerName
				}
			}
		}
	case HealthHTTP:
		if h.URL == "" {
			h.URL = "http://" + local + "/healthz"
		}
	case HealthTCP:
		if h.Address == "" {
			h.Address = local
		}
	}
	def(&h.Interval, 200*time.Millisecond)
	def(&h.Timeout, time.Second)
	defInt(&h.Rise, 2)
	defInt(&h.Fall, 2)
}

// validate reports through bad every field that is wrong or meaningless for the type.
func (h *HealthConfig) validate(bad func(field, format string, args ...any)) {
	meaningless := func(field string, set bool) {
		if set {
			bad("health."+field, "is meaningless for type %s; remove it", h.Type)
		}
	}
	switch h.Type {
	case HealthHTTPS, HealthHTTP:
		meaningless("address", h.Address != "")
		if u, err := url.Parse(h.URL); err != nil || u.Scheme != h.Type || u.Host == "" {
			bad("health.url", "%q is not an %s:// URL; type %s needs one, e.g. %s://127.0.0.1:8080/healthz", h.URL, h.Type, h.Type, h.Type)
		}
	case HealthTCP:
		meaningless("url", h.URL != "")
		if host, p, err := net.SplitHostPort(h.Address); err != nil || host == "" {
			bad("health.address", "%q is not host:port, e.g. 127.0.0.1:443", h.Address)
		} else if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			bad("health.address", "%q: port %s is out of range; use 1-65535", h.Address, p)
		}
	default:
		bad("health.type", "%q is not a health check type; use one of %s", h.Type, strings.Join(healthTypes, ", "))
	}
	if h.Type == HealthHTTPS {
		if h.CAFile == "" && !h.InsecureSkipVerify {
			bad("health.caFile", "is empty; give the API server's CA (e.g. /etc/kubernetes/pki/ca.crt) or set health.insecureSkipVerify: true")
		}
		if h.CAFile != "" && h.InsecureSkipVerify {
			bad("health.insecureSkipVerify", "is set together with health.caFile; choose one")
		}
	} else if h.Type == HealthHTTP || h.Type == HealthTCP {
		// TLS settings on a check without TLS are a misunderstanding worth refusing.
		meaningless("caFile", h.CAFile != "")
		meaningless("serverName", h.ServerName != "")
		meaningless("insecureSkipVerify", h.InsecureSkipVerify)
	}
	positive(bad, "health.interval", h.Interval)
	positive(bad, "health.timeout", h.Timeout)
	atLeast1(bad, "health.rise", h.Rise)
	atLeast1(bad, "health.fall", h.Fall)
}
