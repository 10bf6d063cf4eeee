package agent

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/modes/election"
)

func TestMembershipRules(t *testing.T) {
	cases := []struct {
		name string
		// setup runs before the agent's steps.
		setup  func(ml *fakeML)
		holds  bool
		reason string
	}{
		{"all agree: claims", func(*fakeML) {}, true, ""},
		{"a peer advertises a newer membership: never claims, pulls it",
			func(ml *fakeML) {
				ml.version = 3
				ml.others[0].Meta = election.Meta{Eligible: false, Version: 4, ConfigDigest: "newer"}
			},
			false, "claim withheld: a peer runs membership version 4, this node 3"},
		{"not in the membership it runs: never claims",
			func(ml *fakeML) { ml.nonMember = true },
			false, "not a member of membership version"},
		{"members disagree on the configuration: no claim quorum",
			func(ml *fakeML) {
				ml.others[0].Meta = election.Meta{Eligible: true, ConfigDigest: "other"}
				ml.others[1].Meta = election.Meta{Eligible: true, ConfigDigest: "other"}
			},
			false, "no quorum"},
		{"a majority still on the older version: no claim quorum",
			func(ml *fakeML) {
				ml.version = 5
				ml.others[0].Meta = election.Meta{Eligible: true, Version: 4, ConfigDigest: "old"}
				ml.others[1].Meta = election.Meta{Eligible: true, Version: 4, ConfigDigest: "old"}
			},
			false, "claim withheld: 1 of 3 members agree"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, ml, dp, _ := newTestAgent(t, 0)
			tc.setup(ml)
			t0 := time.Now()
			for _, d := range []time.Duration{0, 600 * time.Millisecond, time.Second, 2 * time.Second} {
				step(a, t0.Add(d))
			}
			g.Expect(a.st.holding).To(Equal(tc.holds), "%+v", a.Status())
			g.Expect(dp.announce).To(Equal(tc.holds))
			if tc.reason != "" {
				s := a.Status()
				g.Expect(s.Waiting + " " + s.Decision + " " + a.rules.ineligibleReason(a.st, a.gather(time.Now(), requests{}))).To(ContainSubstring(tc.reason))
			}
			if tc.name == "a peer advertises a newer membership: never claims, pulls it" {
				g.Eventually(func() []string { ml.mu.Lock(); defer ml.mu.Unlock(); return ml.pulled }).Should(ContainElement("b"))
				g.Expect(a.Status().NewestVersion).To(Equal(int64(4)))
			}
		})
	}
}

// TestRemovedHolderHandsOver: a holder that learns a membership without
// itself stops being eligible and hands over make-before-break: it keeps
// the VIP until a member holds it, then drains and releases.
func TestRemovedHolderHandsOver(t *testing.T) {
	g := NewWithT(t)
	a, ml, dp, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	ml.mu.Lock()
	ml.nonMember, ml.version = true, 7
	ml.mu.Unlock()
	step(a, t0.Add(time.Second))
	g.Expect(a.st.holding).To(BeTrue(), "no successor yet: keeps the VIP")
	g.Expect(ml.self.Eligible).To(BeFalse(), "a non-member is never eligible")
	g.Expect(dp.quiet).To(BeTrue(), "stops announcing so that the successor's announcements win")
	ml.set(0, true, election.Meta{Eligible: true, Holding: true}) // b claims
	step(a, t0.Add(1100*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "draining")
	step(a, t0.Add(1700*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "released after the drain")
	g.Expect(a.Status().Report.Member).To(BeFalse())
}

type fakeProber struct {
	res   probeResult
	calls int
}

func (p *fakeProber) probe([]netip.Addr) (probeResult, error) { p.calls++; return p.res, nil }

// TestBootstrap: dynamic membership at version 0 with no members: the node
// probes the VIP and takes it alone only if nobody answers; version 1 with
// itself keeps it holding without a gap; version 1 without it hands over.
func TestBootstrap(t *testing.T) {
	g := NewWithT(t)
	p := &fakeProber{res: probeResult{answered: true}}
	a, ml, dp, _ := newTestAgent(t, 0, func(s *testSetup) {
		s.cfg.Membership.Dynamic = true
		s.parts.prober = p
	})
	ml.mu.Lock()
	ml.nonMember, ml.version, ml.others = true, 0, nil
	ml.mu.Unlock()
	t0 := time.Now()
	step(a, t0)
	g.Expect(a.st.holding).To(BeFalse())
	g.Expect(a.Status().Waiting + a.Status().Decision).To(ContainSubstring("another host answers for the VIP"))
	step(a, t0.Add(100*time.Millisecond))
	g.Expect(p.calls).To(Equal(1), "backs off before probing again")
	p.res = probeResult{competing: true}
	step(a, t0.Add(2100*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse(), "a competing probe: backs off")
	p.res = probeResult{}
	step(a, t0.Add(4200*time.Millisecond))
	g.Expect(a.st.holding).To(BeTrue(), "nobody answers: holds alone")
	g.Expect(dp.announce).To(BeTrue())
	g.Expect(a.Status().Report.Holding).To(BeTrue())

	// Version 1 = {self}: keeps holding, no release in between.
	ml.mu.Lock()
	ml.nonMember, ml.version = false, 1
	ml.mu.Unlock()
	transitions := a.st.transitions
	step(a, t0.Add(4300*time.Millisecond))
	step(a, t0.Add(5*time.Second))
	g.Expect(a.st.holding).To(BeTrue())
	g.Expect(a.st.transitions).To(Equal(transitions), "no gap")
	g.Expect(a.Status().Report.MembershipVersion).To(Equal(int64(1)))
}

// TestNodeQuiesce: the Node's quiesce/disabled request hands over like the
// admin one, and the report says quiesced only once the VIP is gone; the
// request from one source stays while the other withdraws.
func TestNodeQuiesce(t *testing.T) {
	g := NewWithT(t)
	a, ml, _, _ := newTestAgent(t, 0)
	t0 := claimAsMostPreferred(t, a, ml)
	quiesce(a, t0.Add(time.Second), quiesceRequest{source: "node", reason: "disabled annotation: maintenance"},
		quiesceRequest{source: "admin", reason: "admin request"})
	r := a.Status().Report
	g.Expect(r.Quiesced).To(BeFalse(), "still holding: not quiesced")
	g.Expect(r.Reason).To(ContainSubstring("disabled annotation: maintenance"))
	ml.set(0, true, election.Meta{Eligible: true, Holding: true})
	step(a, t0.Add(1100*time.Millisecond))
	step(a, t0.Add(1700*time.Millisecond))
	g.Expect(a.st.holding).To(BeFalse())
	g.Expect(a.Status().Report.Quiesced).To(BeTrue())
	g.Expect(a.Status().Report.InDataPlane).To(BeFalse())
	quiesce(a, t0.Add(1800*time.Millisecond), quiesceRequest{source: "admin"})
	g.Expect(a.st.quiescing).To(BeTrue(), "the Node still asks")
	quiesce(a, t0.Add(1900*time.Millisecond), quiesceRequest{source: "node"})
	g.Expect(a.st.quiescing).To(BeFalse())
}

func TestMemberStore(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "sub", "membership.json")
	cfg := &agentv1.AgentConfiguration{NodeName: "a", Members: []agentv1.MemberConfig{{Name: "a", Address: "192.0.2.1"}},
		Membership: agentv1.MembershipConfig{Dynamic: true, Version: 2, StateFile: state}}
	s, err := newMemberStore(cfg, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.current().Version).To(Equal(int64(2)), "from the configuration file")
	var ran []int64
	s.run = func(r election.Roster) { ran = append(ran, r.Version) }

	v3 := agentv1.Membership{Version: 3, Members: []agentv1.MemberConfig{{Name: "a", Address: "192.0.2.1"}, {Name: "b", Address: "192.0.2.2"}}}
	g.Expect(s.offer(v3, "node")).To(BeTrue())
	g.Expect(s.offer(agentv1.Membership{Version: 1}, "gossip")).To(BeFalse(), "older: ignored")
	g.Expect(s.offer(agentv1.Membership{Version: 3}, "gossip")).To(BeFalse(), "same version: the running one stays")
	g.Expect(s.offer(agentv1.Membership{Version: 9, Members: []agentv1.MemberConfig{{Name: "", Address: "x"}}}, "gossip")).To(BeFalse(), "invalid")
	g.Expect(ran).To(Equal([]int64{3}), "run only after it was kept")

	fi, err := os.Stat(state)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	var onDisk agentv1.Membership
	b, _ := os.ReadFile(state)
	g.Expect(json.Unmarshal(b, &onDisk)).To(Succeed())
	g.Expect(onDisk).To(Equal(v3))
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(state), ".membership-*"))
	g.Expect(left).To(BeEmpty(), "no temporary file left")

	// A restart with the older configuration starts from the state file.
	s2, err := newMemberStore(cfg, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s2.current()).To(Equal(v3))

	// A state file that cannot be written: the version is not run.
	ro := &memberStore{path: filepath.Join(dir, "missing-dir-is-a-file", "m.json"), log: logr.Discard(), cur: v3}
	g.Expect(os.WriteFile(filepath.Join(dir, "missing-dir-is-a-file"), nil, 0o600)).To(Succeed())
	ro.run = func(election.Roster) { t.Error("ran a version it could not keep") }
	g.Expect(ro.offer(agentv1.Membership{Version: 4}, "node")).To(BeFalse())
}

func TestReadKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, content string
		mode          os.FileMode
		err           string
	}{
		{"base64 32 bytes, 0600", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n", 0o600, ""},
		{"raw 16 bytes, 0400", "0123456789abcdef", 0o400, ""},
		// cloud-init (CABPK's bootstrap data) ends every file it writes with a newline.
		{"raw 16 bytes and cloud-init's newline", "0123456789abcdef\n", 0o600, ""},
		{"group-readable", "0123456789abcdef", 0o640, "readable or writable by group or others"},
		{"world-readable", "0123456789abcdef", 0o644, "chmod 600"},
		{"wrong length", "short", 0o600, "want 16, 24 or 32 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := readKey("election.secretKeyFile", write(tc.name, tc.content, tc.mode))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				g.Expect(err.Error()).To(HavePrefix("election.secretKeyFile: "))
			}
		})
	}
	g := NewWithT(t)
	keys, err := readKeys(agentv1.ElectionConfig{SecretKeyFile: write("p", "0123456789abcdef", 0o600),
		SecondaryKeyFiles: []string{write("s", "fedcba9876543210", 0o600)}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(Equal([][]byte{[]byte("0123456789abcdef"), []byte("fedcba9876543210")}), "primary first")
	_, err = readKeys(agentv1.ElectionConfig{SecretKeyFile: write("p2", "0123456789abcdef", 0o600),
		SecondaryKeyFiles: []string{write("s2", "fedcba9876543210", 0o644)}})
	g.Expect(err).To(MatchError(ContainSubstring("election.secondaryKeyFiles[0]")))
}
