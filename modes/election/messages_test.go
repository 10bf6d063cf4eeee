package election

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// TestSendDeliversToOneMember: a user message reaches the named member's OnMessage with the
// sender's name and the payload, whole (larger than one UDP packet), and nobody else's; a
// member that is not alive is an error, not a silent drop.
func TestSendDeliversToOneMember(t *testing.T) {
	g := NewWithT(t)
	port := freePort(t)
	key := []byte("0123456789abcdef")
	var members []Member
	for i := 1; i <= 3; i++ {
		members = append(members, Member{Name: fmt.Sprintf("m%d", i), Address: netip.AddrFrom4([4]byte{127, 0, 0, byte(i)})})
	}
	type got struct{ from, payload string }
	var mu sync.Mutex
	inbox := map[string][]got{}
	var ms []*Membership
	for _, self := range members {
		name := self.Name
		m, err := Start(Config{
			Self: name, Members: members, Port: port, Keys: [][]byte{key},
			ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
			SuspicionMult: 2, GossipInterval: 20 * time.Millisecond, RejoinInterval: 200 * time.Millisecond,
			OnMessage: func(from string, payload []byte) {
				mu.Lock()
				defer mu.Unlock()
				inbox[name] = append(inbox[name], got{from, string(payload)})
			},
		}, Meta{}, logr.Discard())
		g.Expect(err).NotTo(HaveOccurred())
		ms = append(ms, m)
		t.Cleanup(func() { _ = m.Close() })
	}
	g.Eventually(func() int { return ms[0].ml.NumMembers() }, 5*time.Second, 20*time.Millisecond).Should(Equal(3))

	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(i)
	}
	g.Expect(ms[0].Send("m2", big)).To(Succeed())
	g.Eventually(func() []got {
		mu.Lock()
		defer mu.Unlock()
		return append([]got(nil), inbox["m2"]...)
	}, 5*time.Second, 10*time.Millisecond).Should(Equal([]got{{"m1", string(big)}}))
	mu.Lock()
	g.Expect(inbox["m1"]).To(BeEmpty())
	g.Expect(inbox["m3"]).To(BeEmpty())
	mu.Unlock()

	g.Expect(ms[0].Send("nobody", []byte("x"))).To(MatchError(ContainSubstring("nobody is not alive")))
}

func TestParseUserMessage(t *testing.T) {
	cases := []struct {
		name     string
		in       []byte
		user     bool
		from     string
		payload  string
		whatErrs string
	}{
		{name: "membership document", in: []byte(`{"version":1}`)},
		{name: "empty", in: nil},
		{name: "message", in: append([]byte{userMessageTag, 2}, "m1hello"...), user: true, from: "m1", payload: "hello"},
		{name: "empty payload", in: append([]byte{userMessageTag, 2}, "m1"...), user: true, from: "m1"},
		{name: "no length", in: []byte{userMessageTag}, user: true, whatErrs: "shorter"},
		{name: "name cut short", in: append([]byte{userMessageTag, 5}, "m1"...), user: true, whatErrs: "shorter"},
		{name: "no sender", in: []byte{userMessageTag, 0, 'x'}, user: true, whatErrs: "without a sender"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			from, payload, user, err := parseUserMessage(c.in)
			g.Expect(user).To(Equal(c.user))
			if c.whatErrs != "" {
				g.Expect(err).To(MatchError(ContainSubstring(c.whatErrs)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(from).To(Equal(c.from))
			g.Expect(string(payload)).To(Equal(c.payload))
		})
	}
}
