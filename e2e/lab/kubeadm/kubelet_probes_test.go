//go:build linux

package kubeadm

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The mirror Pod's status follows the manifest's probes as the kubelet's does: not running
// before the liveness probe first answers, Ready only while the readiness probe succeeds, a
// change only after the thresholds, and a container whose liveness probe fails is no longer
// running.
func TestPodProbesStatus(t *testing.T) {
	g := NewWithT(t)
	var live, ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := live.Load()
		if r.URL.Path == "/readyz" {
			ok = ok && ready.Load()
		}
		if !ok {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	port := netip.MustParseAddrPort(srv.Listener.Addr().String()).Port()
	probe := func(path string, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Path: path,
			Port: intstr.FromString("probe-port")}}, PeriodSeconds: 10, FailureThreshold: failures}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.36.3",
		Ports:          []corev1.ContainerPort{{Name: "probe-port", ContainerPort: int32(port)}},
		LivenessProbe:  probe("/livez", 2),
		ReadinessProbe: probe("/readyz", 1),
	}}}}
	var d net.Dialer
	m := Machine{Name: "cp-1", Addr: netip.MustParseAddr("127.0.0.1")}
	pp := &podProbes{}
	round := func() corev1.PodStatus {
		// Each probe waits for its period: the rounds of the test are a period apart.
		pp.live.last, pp.ready.last = pp.live.last.AddDate(-1, 0, 0), pp.ready.last.AddDate(-1, 0, 0)
		return pp.status(context.Background(), d.DialContext, pod, m)
	}
	podReady := func(st corev1.PodStatus) corev1.ConditionStatus {
		for _, c := range st.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}

	st := round()
	g.Expect(st.Phase).To(Equal(corev1.PodPending), "nothing answers yet")
	g.Expect(st.ContainerStatuses[0].State.Waiting.Reason).To(Equal("ContainerCreating"))
	g.Expect(podReady(st)).To(Equal(corev1.ConditionFalse))

	live.Store(true)
	st = round()
	g.Expect(st.Phase).To(Equal(corev1.PodRunning))
	g.Expect(st.ContainerStatuses[0].State.Running).NotTo(BeNil())
	g.Expect(podReady(st)).To(Equal(corev1.ConditionFalse), "running but its readiness probe fails")

	ready.Store(true)
	g.Expect(podReady(round())).To(Equal(corev1.ConditionTrue))
	g.Expect(st.PodIP).To(Equal("127.0.0.1"), "a host-network pod has the node's address")

	ready.Store(false)
	g.Expect(podReady(round())).To(Equal(corev1.ConditionFalse), "readiness fails once: failureThreshold 1")

	ready.Store(true)
	live.Store(false)
	st = round()
	g.Expect(st.ContainerStatuses[0].State.Running).NotTo(BeNil(), "one liveness failure of the two the threshold allows")
	g.Expect(podReady(st)).To(Equal(corev1.ConditionFalse), "not ready while its readiness probe fails")
	st = round()
	g.Expect(st.Phase).To(Equal(corev1.PodRunning))
	g.Expect(st.ContainerStatuses[0].State.Waiting.Reason).To(Equal("CrashLoopBackOff"), "the second liveness failure: not running")
	g.Expect(podReady(st)).To(Equal(corev1.ConditionFalse))
}
