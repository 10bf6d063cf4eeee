package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/controllers"
)

// A --workload-kubeconfig that cannot be used, and flags that do not go together, fail before
// any cluster is contacted, with an error that names the flag and the fix.
func TestCleanupWorkloadKubeconfigErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("{{{ not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "wl.conf")
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing file", []string{"--workload-kubeconfig", missing},
			[]string{"--workload-kubeconfig", missing, "no such file", "clusterctl get kubeconfig <cluster> > " + missing}},
		{"not a kubeconfig", []string{"--workload-kubeconfig", garbage},
			[]string{"--workload-kubeconfig " + garbage + " is not a usable kubeconfig"}},
		{"--lease-namespace alone", []string{"--lease-namespace", "kube-system"},
			[]string{"--lease-namespace", "give --workload-kubeconfig too"}},
		{"with --nodes", []string{"--workload-kubeconfig", missing, "--nodes"},
			[]string{"--workload-kubeconfig removes fences only", "run it separately"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var out bytes.Buffer
			root := newRootCommand()
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append([]string{"cleanup"}, tt.args...))
			err := root.Execute()
			for _, s := range tt.want {
				g.Expect(err).To(MatchError(ContainSubstring(s)))
			}
		})
	}
}

// The fence cleanup prints one line per fence: what it removed (or would) and why, and what it
// kept and what to do about it.
func TestRunFenceCleanupOutput(t *testing.T) {
	s := runtime.NewScheme()
	if err := controllers.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	lease := func(name, holder string) client.Object {
		return &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name},
			Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	staging := &lbv1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "staging-cp"},
		Spec: lbv1.LoadBalancerSpec{Backend: lbv1.Backend{BGP: &lbv1.BGPBackend{TakeOver: &lbv1.TakeOver{KubeVIP: &lbv1.KubeVIPTakeOver{}}}}}}
	for _, tt := range []struct {
		name   string
		dryRun bool
		want   string
	}{
		{"removes", false, "removed fence Lease kube-system/plndr-cp-lock of LoadBalancer default/prod-cp (LoadBalancer gone)\n" +
			"kept fence Lease kube-system/staging-lock: LoadBalancer default/staging-cp still takes the VIP over " +
			"(remove spec.backend.bgp.takeOver or delete it first)\n"},
		{"dry run", true, "would remove fence Lease kube-system/plndr-cp-lock of LoadBalancer default/prod-cp (LoadBalancer gone)\n" +
			"kept fence Lease kube-system/staging-lock: LoadBalancer default/staging-cp still takes the VIP over " +
			"(remove spec.backend.bgp.takeOver or delete it first)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mgmt := fake.NewClientBuilder().WithScheme(s).WithObjects(staging).Build()
			wl := fake.NewClientBuilder().WithScheme(s).WithObjects(lease("plndr-cp-lock", "caplb:default/prod-cp"),
				lease("staging-lock", "caplb:default/staging-cp"), lease("other", "node-1")).Build()
			var out, errOut bytes.Buffer
			err := runFenceCleanup(context.Background(), mgmt, wl, controllers.FenceCleanupOptions{DryRun: tt.dryRun}, &out, &errOut)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.String()).To(Equal(tt.want))
			g.Expect(errOut.String()).To(BeEmpty())
		})
	}
	g := NewWithT(t)
	var out bytes.Buffer
	err := runFenceCleanup(context.Background(), fake.NewClientBuilder().WithScheme(s).Build(),
		fake.NewClientBuilder().WithScheme(s).Build(), controllers.FenceCleanupOptions{LeaseNamespace: "vip"}, &out, &out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.String()).To(Equal("no caplb fence Lease in namespace vip of the workload cluster\n"))
}
