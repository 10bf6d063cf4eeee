package election

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/memberlist"
	. "github.com/onsi/gomega"
)

// TestSendDeliversToOneMember: a user message reaches the named member's OnMessage with the
// sender's name and the payload, whole (larger than one UDP packet), and nobody else's; a
// member that is not alive is an error, not a silent drop.
func TestSendDeliversToOneMember(t *testing.T) {
	g := NewWithT(t)
	ms, received := startMessaging(t, g, "")
	inbox := func(name string) []got {
		var out []got
		for _, r := range received() {
			if r.to == name {
				out = append(out, got{r.from, r.payload})
			}
		}
		return out
	}

	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(i)
	}
	g.Expect(ms[0].Send("m2", big)).To(Succeed())
	g.Eventually(func() []got { return inbox("m2") }, 5*time.Second, 10*time.Millisecond).Should(Equal([]got{{"m1", string(big)}}))
	g.Expect(inbox("m1")).To(BeEmpty())
	g.Expect(inbox("m3")).To(BeEmpty())

	g.Expect(ms[0].Send("nobody", []byte("x"))).To(MatchError(ContainSubstring("nobody is not alive")))
}

// got is a user message as a test receives it.
type got struct{ from, payload string }

// delivery is a user message delivered to member to.
type delivery struct{ to, from, payload string }

// startMessaging starts members m1..m3 on 127.0.0.1-3 with one gossip key and label, waits until
// they see each other, and returns them with a reader of every delivered user message.
func startMessaging(t *testing.T, g Gomega, label string) ([]*Membership, func() []delivery) {
	t.Helper()
	port := freePort(t)
	key := []byte("0123456789abcdef")
	var members []Member
	for i := 1; i <= 3; i++ {
		members = append(members, Member{Name: fmt.Sprintf("m%d", i), Address: netip.AddrFrom4([4]byte{127, 0, 0, byte(i)})})
	}
	var mu sync.Mutex
	var inbox []delivery
	var ms []*Membership
	for _, self := range members {
		name := self.Name
		m, err := Start(Config{
			Self: name, Members: members, Port: port, Keys: [][]byte{key}, Label: label,
			ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond,
			SuspicionMult: 2, GossipInterval: 20 * time.Millisecond, RejoinInterval: 200 * time.Millisecond,
			OnMessage: func(from string, payload []byte) {
				mu.Lock()
				defer mu.Unlock()
				inbox = append(inbox, delivery{name, from, string(payload)})
			},
		}, Meta{}, logr.Discard())
		g.Expect(err).NotTo(HaveOccurred())
		ms = append(ms, m)
		t.Cleanup(func() { _ = m.Close() })
	}
	for _, m := range ms {
		g.Eventually(func() int { return m.ml.NumMembers() }, 5*time.Second, 20*time.Millisecond).Should(Equal(3))
	}
	return ms, func() []delivery {
		mu.Lock()
		defer mu.Unlock()
		return append([]delivery(nil), inbox...)
	}
}

func TestParseUserMessage(t *testing.T) {
	cases := []struct {
		name     string
		in       []byte
		from     string
		payload  string
		whatErrs string
	}{
		{name: "message", in: append([]byte{2}, "m1hello"...), from: "m1", payload: "hello"},
		{name: "empty payload", in: append([]byte{2}, "m1"...), from: "m1"},
		{name: "empty", in: nil, whatErrs: "shorter"},
		{name: "name cut short", in: append([]byte{5}, "m1"...), whatErrs: "shorter"},
		{name: "no sender", in: []byte{0, 'x'}, whatErrs: "without a sender"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			from, payload, err := parseUserMessage(c.in)
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

// TestUserMessageSenderIsBound: a member holding the gossip key that names another member as
// the sender is not believed (the receiver checks the connection's address against gossip's),
// nor is a message sealed with another key; the member's own messages still arrive. Before user
// streams, the sender's name was whatever the message said.
func TestUserMessageSenderIsBound(t *testing.T) {
	g := NewWithT(t)
	ms, all := startMessaging(t, g, "lb")
	port := ms[0].cfg.Port
	received := func() []got {
		var out []got
		for _, r := range all() {
			if r.to == "m2" {
				out = append(out, got{r.from, r.payload})
			}
		}
		return out
	}
	forge := func(as string, sealer *Membership) {
		body, err := sealer.seal(append([]byte{byte(len(as))}, as+"forged"...))
		g.Expect(err).NotTo(HaveOccurred())
		frame := append(append([]byte(nil), userStreamMagic...), byte(len(body)>>24), byte(len(body)>>16), byte(len(body)>>8), byte(len(body)))
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
		c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.2", fmt.Sprint(port)))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = c.Write(append(frame, body...))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Close()).To(Succeed())
	}
	// m3, with the key, speaks as m1.
	forge("m1", ms[2])
	// Sealed with a key the members do not have.
	stranger := &Membership{cfg: Config{Keys: [][]byte{[]byte("fedcba9876543210")}, Label: "lb"}}
	forge("m3", stranger)
	// m3's own message, after both.
	g.Expect(ms[2].Send("m2", []byte("mine"))).To(Succeed())
	g.Eventually(received, 5*time.Second, 10*time.Millisecond).Should(ContainElement(got{"m3", "mine"}))
	g.Consistently(received, 300*time.Millisecond, 20*time.Millisecond).Should(Equal([]got{{"m3", "mine"}}),
		"neither the forged sender nor the foreign key got through")
}

// A member memberlist declared dead while it still serves (starved of CPU: its acks came too
// late) is still heard from, and still reached, at the address it had; the address still binds
// its name: another key holder cannot speak for it.
func TestUserMessagesOfAMemberDeclaredDead(t *testing.T) {
	g := NewWithT(t)
	ms, all := startMessaging(t, g, "lb")
	port := ms[0].cfg.Port
	// m2 (and only m2) declares m1 dead, as memberlist's events would.
	(*events)(ms[1]).record(&memberlist.Node{Name: "m1"}, nodeLeft)
	g.Expect(ms[1].View().Members[0]).To(HaveField("Alive", BeFalse()), "m2 sees m1 dead")
	inbox := func(to string) []got {
		var out []got
		for _, r := range all() {
			if r.to == to {
				out = append(out, got{r.from, r.payload})
			}
		}
		return out
	}
	g.Expect(ms[0].Send("m2", []byte("still here"))).To(Succeed())
	g.Eventually(func() []got { return inbox("m2") }, 5*time.Second, 10*time.Millisecond).Should(ContainElement(got{"m1", "still here"}))

	g.Expect(ms[1].Send("m1", []byte("x"))).To(MatchError(ContainSubstring("m1 is not alive")), "Send keeps to the alive")
	g.Expect(ms[1].SendDeparted("m1", []byte("to the departed"))).To(Succeed())
	g.Eventually(func() []got { return inbox("m1") }, 5*time.Second, 10*time.Millisecond).Should(ContainElement(got{"m2", "to the departed"}))
	g.Expect(ms[1].SendDeparted("nobody", []byte("x"))).To(MatchError(ContainSubstring("nobody was never seen")))

	// m3, with the key, speaks as the departed m1 from its own address: dropped.
	body, err := ms[2].seal(append([]byte{2}, "m1forged"...))
	g.Expect(err).NotTo(HaveOccurred())
	frame := append(append([]byte(nil), userStreamMagic...), byte(len(body)>>24), byte(len(body)>>16), byte(len(body)>>8), byte(len(body)))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.2", fmt.Sprint(port)))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Write(append(frame, body...))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Close()).To(Succeed())
	g.Expect(ms[2].Send("m2", []byte("after the forgery"))).To(Succeed())
	g.Eventually(func() []got { return inbox("m2") }, 5*time.Second, 10*time.Millisecond).Should(ContainElement(got{"m3", "after the forgery"}))
	g.Consistently(func() []got { return inbox("m2") }, 300*time.Millisecond, 20*time.Millisecond).ShouldNot(ContainElement(got{"m1", "forged"}))
}
