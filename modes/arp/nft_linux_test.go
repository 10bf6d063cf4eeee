//go:build linux

package arp

import (
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netns"
)

// inFreshNetns runs fn on a thread in a new, empty network namespace (so
// nothing touches the host's ruleset). Root only.
func inFreshNetns(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: nftables test needs root")
		}
		t.Skip("needs root (network namespaces, nftables)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread ends with the goroutine, namespace and all
		if _, err := netns.New(); err != nil {
			t.Errorf("new netns: %v", err)
			return
		}
		fn()
	}()
	<-done
}

func listTables(g Gomega) []string {
	c, err := nftables.New()
	g.Expect(err).NotTo(HaveOccurred())
	ts, err := c.ListTables()
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, t := range ts {
		out = append(out, familyName(t.Family)+" "+t.Name)
	}
	return out
}

// TestNetlinkTables programs the real kernel over netlink: the hand-over and
// quiet tables go in (twice: a replace, not an error) and come out again.
func TestNetlinkTables(t *testing.T) {
	inFreshNetns(t, func() {
		g := NewWithT(t)
		tb := nftTables{}
		vips := []netip.Addr{netip.MustParseAddr("10.0.0.100"), netip.MustParseAddr("fd00::100")}
		for _, prev := range []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")} {
			g.Expect(tb.installHandover("lo", vips, prev)).To(Succeed())
			g.Expect(tb.installHandover("lo", vips, prev)).To(Succeed())
		}
		g.Expect(tb.installQuiet(vips)).To(Succeed())
		g.Expect(tb.installQuiet(vips)).To(Succeed())
		g.Expect(listTables(g)).To(ConsistOf("ip caplb_handover", "ip6 caplb_handover", "arp caplb_quiet", "ip6 caplb_quiet"))

		c, err := nftables.New()
		g.Expect(err).NotTo(HaveOccurred())
		rules, err := c.GetRules(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: HandoverTable},
			&nftables.Chain{Name: "prerouting"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rules).To(HaveLen(2), "one VIP of the family: record + redirect")

		g.Expect(tb.removeHandover()).To(Succeed())
		g.Expect(tb.removeQuiet()).To(Succeed())
		g.Expect(listTables(g)).To(BeEmpty())
		// Removing what is not there is not an error.
		g.Expect(tb.removeHandover()).To(Succeed())
		g.Expect(tb.removeQuiet()).To(Succeed())
	})
}

// TestNetlinkTablesNameTheFailingRule: a rule the kernel refuses is named
// in the error, and nothing of the table is left behind.
func TestNetlinkTablesNameTheFailingRule(t *testing.T) {
	inFreshNetns(t, func() {
		g := NewWithT(t)
		spec, _ := quietSpecs([]netip.Addr{netip.MustParseAddr("10.0.0.100")})
		spec.rules = append(spec.rules, nftRule{desc: "lookup in a set that does not exist",
			exprs: []expr.Any{&expr.Lookup{SourceRegister: reg1, SetName: "missing"}}})
		err := netlinkTables{}.replace(spec)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring(`table arp caplb_quiet: rule "lookup in a set that does not exist"`))
		g.Expect(listTables(g)).To(BeEmpty())

		err = nftTables{}.installHandover("no-such-if", []netip.Addr{netip.MustParseAddr("10.0.0.100")}, netip.MustParseAddr("10.0.0.2"))
		g.Expect(err).To(MatchError(ContainSubstring(`interface "no-such-if"`)))
	})
}
