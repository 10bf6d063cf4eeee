package observe

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// rollout is a synthetic timeline: n1 holds the VIP, m2 joins, the VIP
// moves to n2 with a 20 ms overlap, m1 is deleted behind its hook.
func rollout(failures bool) Input {
	var hs []HolderSample
	for ms := 0; ms <= 10000; ms += 10 {
		h := HolderSample{At: at(ms)}
		switch {
		case ms < 6000:
			h.Holders = []string{"n1"}
		case ms < 6020:
			h.Holders = []string{"n1", "n2"}
		default:
			h.Holders = []string{"n2"}
		}
		hs = append(hs, h)
	}
	evs := []Event{
		{At: at(0), Type: EventStep, Text: "endpoint published"},
		{At: at(100), Type: EventPhase, Machine: "cp-1", Phase: "Running"},
		{At: at(2000), Type: EventStep, Text: "roll cp-1"},
		{At: at(2000), Type: EventReplacementStart, Round: 1},
		{At: at(2100), Type: EventPhase, Machine: "cp-2", Phase: "Provisioning"},
		{At: at(4000), Type: EventPhase, Machine: "cp-2", Phase: "Running"},
		{At: at(5000), Type: EventPhase, Machine: "cp-1", Phase: "Deleting"},
		{At: at(5000), Type: EventHookHeld, Machine: "cp-1"},
		{At: at(6500), Type: EventHookReleased, Machine: "cp-1"},
		{At: at(7000), Type: EventPhase, Machine: "cp-1", Phase: "Deleted"},
		{At: at(7000), Type: EventReplacementEnd, Round: 1},
		{At: at(7000), Type: EventStep, Text: "disable <cp-2> & check"},
		{At: at(10000), Type: EventStep, Text: "settled"},
	}
	samples := cat(every(Fresh, 0, 10000, 10, true), every(Kept, 5, 10000, 10, true), lines(0, 10000, 50))
	if failures {
		samples = append(samples, Sample{At: at(6010), Kind: Kept, Err: "read: connection reset by peer"})
	}
	return Input{Backend: "arp", Samples: samples, Timeline: Timeline{Holders: hs, Events: evs}}
}

// parse checks the SVG is well-formed XML and returns its elements.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

func parse(g Gomega, svg []byte) []element {
	d := xml.NewDecoder(bytes.NewReader(svg))
	var out []element
	var stack []int
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred(), "well-formed XML")
		switch t := tok.(type) {
		case xml.StartElement:
			e := element{name: t.Name.Local, attrs: map[string]string{}}
			for _, a := range t.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(t)
			}
		}
	}
	g.Expect(stack).To(BeEmpty())
	g.Expect(out[0].name).To(Equal("svg"))
	return out
}

func texts(es []element) string {
	var b strings.Builder
	for _, e := range es {
		if e.name == "text" || e.name == "tspan" {
			b.WriteString(e.text + "\n")
		}
	}
	return b.String()
}

func count(es []element, cond func(element) bool) int {
	n := 0
	for _, e := range es {
		if cond(e) {
			n++
		}
	}
	return n
}

func TestRenderSVG(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	g.Expect(RenderSVG(&b, rollout(true))).To(Succeed())
	if dir := os.Getenv("OBSERVE_SVG_DIR"); dir != "" {
		_ = os.WriteFile(dir+"/synthetic.svg", b.Bytes(), 0o644) // to look at by eye
	}
	es := parse(g, b.Bytes())
	all := texts(es)
	for _, label := range []string{"VIP held by", "n1", "n2", "holders ≠ 1", "Machines", "cp-1", "cp-2",
		"Client on the VIP", "new connections", "kept-alive conn.", "watch-like stream",
		"endpoint published", "roll cp-1", "disable <cp-2> & check", "round 1", "Running", "time since start"} {
		g.Expect(all).To(ContainSubstring(label))
	}
	g.Expect(all).To(ContainSubstring("caplb rollout (arp): 2002 requests, "))
	g.Expect(all).To(ContainSubstring("1 failed"))
	g.Expect(count(es, func(e element) bool { return e.name == "tspan" && e.attrs["fill"] == failColour })).To(Equal(1), "the failed count in red")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "fail" && e.attrs["fill"] == failColour })).To(Equal(1), "one red mark")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "ok" })).To(Equal(3), "binned successes, one bar per lane without a gap")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "held" })).To(Equal(2), "one bar per holder")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "dual" })).To(Equal(1), "the overlap")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "hook" })).To(Equal(1), "the hook's hold")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "phase" })).To(Equal(4), "cp-1 Running, Deleting; cp-2 Provisioning, Running; not Deleted")
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "step" })).To(Equal(4))
	g.Expect(count(es, func(e element) bool {
		return e.attrs["class"] == "step" && e.text == "settled" && e.attrs["text-anchor"] == "end"
	})).To(Equal(1), "a label at the right edge is drawn leftwards, not clipped")

	b.Reset()
	g.Expect(RenderSVG(&b, rollout(false))).To(Succeed())
	es = parse(g, b.Bytes())
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "fail" })).To(BeZero())
	g.Expect(count(es, func(e element) bool { return e.attrs["fill"] == failColour && e.attrs["class"] != "legend" })).To(BeZero(), "no red without a failure")
	g.Expect(texts(es)).To(ContainSubstring("0 failed"))
}

func TestRenderSVGEmpty(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	g.Expect(RenderSVG(&b, Input{})).To(Succeed())
	parse(g, b.Bytes())
	// Only a client (BGP: no holder lanes), no events.
	b.Reset()
	g.Expect(RenderSVG(&b, Input{Backend: "bgp", Samples: every(Fresh, 0, 300, 10, true)})).To(Succeed())
	all := texts(parse(g, b.Bytes()))
	g.Expect(all).NotTo(ContainSubstring("VIP held by"))
	g.Expect(all).To(ContainSubstring("dual owner max n/a"))
}

func TestPrint(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	g.Expect(Print(&b, Summarize(rollout(true)))).To(Succeed())
	g.Expect(b.String()).To(SatisfyAll(ContainSubstring("failed requests"), ContainSubstring("1 (new 0, kept-alive 1, stream 0)"),
		ContainSubstring("connection reset by peer"), ContainSubstring("dual owner max")))
}

// etcdMembership is cp-1 alone, cp-2 added as a learner and promoted, a failed read,
// leadership moved to cp-2, cp-1 removed.
func etcdMembership() []EtcdSample {
	return []EtcdSample{
		{At: at(0), Members: []EtcdMember{{Name: "cp-1", Leader: true}}},
		{At: at(2100), Members: []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2", Learner: true}}},
		{At: at(3000), Members: []EtcdMember{{Name: "cp-1", Leader: true}, {Name: "cp-2"}}},
		{At: at(4500), Err: "context deadline exceeded"},
		{At: at(4600), Members: []EtcdMember{{Name: "cp-1"}, {Name: "cp-2", Leader: true}}},
		{At: at(5500), Members: []EtcdMember{{Name: "cp-2", Leader: true}}},
	}
}

func TestEtcdRoles(t *testing.T) {
	end := at(10000)
	for _, tc := range []struct {
		member string
		want   []roleSpan
	}{
		{"cp-1", []roleSpan{{roleLeader, at(0), at(4500)}, {roleUnknown, at(4500), at(4600)}, {roleVoter, at(4600), at(5500)}}},
		{"cp-2", []roleSpan{{roleLearner, at(2100), at(3000)}, {roleVoter, at(3000), at(4500)}, {roleUnknown, at(4500), at(4600)},
			{roleLeader, at(4600), end}}},
		{"cp-9", nil},
	} {
		t.Run(tc.member, func(t *testing.T) {
			got := etcdRoles(etcdMembership(), tc.member, end)
			if tc.want == nil {
				NewWithT(t).Expect(got).To(BeEmpty())
				return
			}
			NewWithT(t).Expect(got).To(Equal(tc.want))
		})
	}
}

func TestRenderSVGEtcdLanes(t *testing.T) {
	g := NewWithT(t)
	in := rollout(false)
	in.Timeline.Etcd = etcdMembership()
	var b bytes.Buffer
	g.Expect(RenderSVG(&b, in)).To(Succeed())
	if dir := os.Getenv("OBSERVE_SVG_DIR"); dir != "" {
		_ = os.WriteFile(dir+"/synthetic-etcd.svg", b.Bytes(), 0o644)
	}
	es := parse(g, b.Bytes())
	all := texts(es)
	g.Expect(all).To(ContainSubstring("etcd members"))
	g.Expect(all).To(ContainSubstring("etcd learner"), "the legend names the roles")
	// The etcd lanes lie between the VIP holders' and the Machines'.
	g.Expect(strings.Index(all, "VIP held by")).To(BeNumerically("<", strings.Index(all, "etcd members")))
	g.Expect(strings.Index(all, "etcd members")).To(BeNumerically("<", strings.Index(all, "Machines")))
	g.Expect(count(es, func(e element) bool { return e.attrs["class"] == "etcd-lane" })).To(Equal(2), "one lane per member")
	for class, n := range map[string]int{"etcd-leader": 2, "etcd-voter": 2, "etcd-learner": 1, "etcd-unknown": 2} {
		g.Expect(count(es, func(e element) bool { return e.attrs["class"] == class })).To(Equal(n), class)
	}

	// Without etcd samples (stand-in API servers): no lane, no legend.
	b.Reset()
	g.Expect(RenderSVG(&b, rollout(false))).To(Succeed())
	all = texts(parse(g, b.Bytes()))
	g.Expect(all).NotTo(ContainSubstring("etcd members"))
	g.Expect(all).NotTo(ContainSubstring("etcd leader"))
}
