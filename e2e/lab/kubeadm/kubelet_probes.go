//go:build linux

package kubeadm

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// dialFunc opens connections from the machine's network (lab.Netns.DialContext).
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// podProbes runs a static pod's probes the way the kubelet does — each at its periodSeconds,
// in the machine's network, a result changing only after failureThreshold failures or
// successThreshold successes in a row — and turns them into the Pod's status. The lab sees no
// container runtime, so "the container runs" is its liveness (else startup) probe answering;
// a pod with no probe at all is taken as running and ready, as the kubelet does once a
// container without probes started.
type podProbes struct {
	first   metav1.Time
	started metav1.Time // the container first answered; zero before
	live    probeState
	ready   probeState
}

type probeState struct {
	ok         bool
	fails, oks int32
	last       time.Time
}

// run probes p if its period elapsed, and returns the result after the thresholds.
func (s *probeState) run(ctx context.Context, dial dialFunc, p *corev1.Probe, host netip.Addr, ports []corev1.ContainerPort) bool {
	period := time.Duration(p.PeriodSeconds) * time.Second
	if period <= 0 {
		period = 10 * time.Second
	}
	if !s.last.IsZero() && time.Since(s.last) < period {
		return s.ok
	}
	s.last = time.Now()
	failAfter, okAfter := max(p.FailureThreshold, 1), max(p.SuccessThreshold, 1)
	if probeOnce(ctx, dial, p, host, ports) {
		s.fails, s.oks = 0, s.oks+1
		if s.oks >= okAfter {
			s.ok = true
		}
	} else {
		s.oks, s.fails = 0, s.fails+1
		if s.fails >= failAfter {
			s.ok = false
		}
	}
	return s.ok
}

// status is the Pod's status from its probes now.
func (pp *podProbes) status(ctx context.Context, dial dialFunc, pod *corev1.Pod, m Machine) corev1.PodStatus {
	now := metav1.Now()
	if pp.first.IsZero() {
		pp.first = now
	}
	var c corev1.Container
	if len(pod.Spec.Containers) > 0 {
		c = pod.Spec.Containers[0]
	}
	live, ready := true, true
	if p := firstProbe(c.LivenessProbe, c.StartupProbe, c.ReadinessProbe); p != nil {
		live = pp.live.run(ctx, dial, p, m.Addr, c.Ports)
		ready = live
	}
	if c.ReadinessProbe != nil {
		ready = pp.ready.run(ctx, dial, c.ReadinessProbe, m.Addr, c.Ports) && live
	}
	if live && pp.started.IsZero() {
		pp.started = now
	}
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: ptr.To(live)}
	switch {
	case live:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: pp.started}
	case pp.started.IsZero():
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "its liveness probe fails (lab kubelet: " + containerName(pod) + " does not answer)"}
	}
	phase := corev1.PodRunning
	if pp.started.IsZero() {
		phase = corev1.PodPending
	}
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	return corev1.PodStatus{
		Phase: phase, HostIP: m.Addr.String(), PodIP: m.Addr.String(),
		HostIPs: []corev1.HostIP{{IP: m.Addr.String()}}, PodIPs: []corev1.PodIP{{IP: m.Addr.String()}},
		StartTime: &pp.first, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: pp.first},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: pp.first},
			{Type: corev1.ContainersReady, Status: readyStatus},
			{Type: corev1.PodReady, Status: readyStatus},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: pp.first},
		},
		ContainerStatuses: []corev1.ContainerStatus{cs},
	}
}

func firstProbe(ps ...*corev1.Probe) *corev1.Probe {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// probeOnce runs one probe: an HTTP GET (2xx and 3xx succeed; HTTPS not verified, as the
// kubelet's) or a TCP connect, from the machine's network; exec and gRPC probes the lab cannot
// run fail.
func probeOnce(ctx context.Context, dial dialFunc, p *corev1.Probe, host netip.Addr, ports []corev1.ContainerPort) bool {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		h := host.String()
		if g.Host != "" {
			h = g.Host
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		u := url.URL{Scheme: scheme, Host: net.JoinHostPort(h, strconv.Itoa(portNumber(g.Port, ports))), Path: g.Path}
		if pu, err := url.Parse(g.Path); err == nil {
			u.Path, u.RawQuery = pu.Path, pu.RawQuery
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return false
		}
		for _, hh := range g.HTTPHeaders {
			req.Header.Add(hh.Name, hh.Value)
		}
		hc := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the kubelet does not verify probes
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil:
		h := host.String()
		if p.TCPSocket.Host != "" {
			h = p.TCPSocket.Host
		}
		c, err := dial(ctx, "tcp", net.JoinHostPort(h, strconv.Itoa(portNumber(p.TCPSocket.Port, ports))))
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	default:
		return false
	}
}

func portNumber(p intstr.IntOrString, ports []corev1.ContainerPort) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}
