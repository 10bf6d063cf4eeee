//go:build linux

package lab_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/e2e/lab"
)

// TestOwnCPU: a namespace's processes run in its own CPU group, the started pid is the
// command's own (signals reach it), and Close removes the group.
func TestOwnCPU(t *testing.T) {
	lab.SkipUnlessRoot(t)
	g := NewWithT(t)
	l, err := lab.New("labcpu")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = l.Close() })
	ns, err := l.AddNamespace("m1")
	g.Expect(err).NotTo(HaveOccurred())
	if err := ns.OwnCPU(); err != nil {
		t.Skipf("no CPU cgroup on this machine: %v", err)
	}
	group := ns.CPUGroup()
	g.Expect(group).NotTo(BeEmpty())

	p, err := ns.Start("sleeper", []string{"sleep", "60"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	inGroup := func() string {
		data, _ := os.ReadFile(filepath.Join(group, "cgroup.procs"))
		return string(data)
	}
	g.Eventually(func() string {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm")
		return strings.TrimSpace(string(comm))
	}).Should(Equal("sleep"), "the pid is the command's own: sh and ip exec'd into it")
	g.Expect(strings.Fields(inGroup())).To(ContainElement(strconv.Itoa(p.Pid())))

	g.Expect(l.Close()).To(Succeed())
	_, err = os.Stat(group)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "Close removes the group")
}
