package observe

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Layout of the timeline, in pixels.
const (
	svgWidth   = 1200
	plotLeft   = 170
	plotRight  = svgWidth - 20
	laneHeight = 18
	laneGap    = 5
	headHeight = 20
	charWidth  = 6.2 // of the 11 px sans-serif labels, roughly
	clientBin  = 100 * time.Millisecond
)

var (
	nodePalette = []string{"#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e", "#7f7f7f"}
	phaseColour = map[string]string{
		"Pending": "#d9d9d9", "Provisioning": "#9ecae1", "Provisioned": "#6baed6",
		"Running": "#74c476", "Deleting": "#fd8d3c", "Failed": "#cb181d",
	}
	// Phases drawn as no bar: the Machine is not there.
	gonePhases = map[string]bool{"": true, "Deleted": true, "Gone": true}
)

const (
	okColour   = "#2ca02c"
	failColour = "#e0001b"
	// resetColour marks a stream reset by the server side and reopened (not a failure).
	resetColour = "#3182bd"
)

// RenderSVG draws the run as one SVG timeline: which node held the VIP, the etcd
// members' roles beside it (a real control plane), each Machine's phases (the pre-drain hook's hold hatched), the client's
// successes (green, per 100 ms) and failures (red), the scenario's steps
// and replacement rounds, and the totals in the title.
func RenderSVG(w io.Writer, in Input) error {
	res := Summarize(in)
	c := newCanvas(in)
	var b bytes.Buffer
	c.b = &b

	// Title and subtitle.
	failFill := okColour
	if res.FailedRequests > 0 {
		failFill = failColour
	}
	fmt.Fprintf(&b, `<text x="12" y="24" font-size="16" font-weight="bold" class="title">%s<tspan fill="%s">%d failed</tspan>%s</text>`+"\n",
		esc(fmt.Sprintf("caplb rollout (%s): %d requests, ", orDash(in.Backend), res.Requests)), failFill, res.FailedRequests,
		esc(fmt.Sprintf(", max gap %.0f ms", res.MaxGapMS)))
	sub := fmt.Sprintf("%.1f s observed · %d replacements (p50 %.1f s, max %.1f s) · hook held max %.1f s · dual owner max %s · no owner max %s · %d stream lines",
		res.DurationS, res.Replacements, res.ReplacementSecondsP50, res.ReplacementSecondsMax, res.HookHoldSecondsMax,
		msOrNA(res.DualOwnerMSMax), msOrNA(res.HolderLessMSMax), res.StreamLines)
	c.text(12, 44, sub, `font-size="12" fill="#444"`)

	// Step labels, in as many rows as they need not to overlap.
	steps := eventsOf(in.Timeline.Events, EventStep)
	var rowEnds []float64
	stepRow := make([]int, len(steps))
	for i, e := range steps {
		w := float64(len(e.Text))*charWidth + 8
		x0 := c.x(e.At)
		if x0+3+w-8 > svgWidth {
			x0 -= w // drawn leftwards of its line
		}
		row := 0
		for row < len(rowEnds) && rowEnds[row] > x0 {
			row++
		}
		if row == len(rowEnds) {
			rowEnds = append(rowEnds, 0)
		}
		rowEnds[row] = x0 + w + 4
		stepRow[i] = row
	}
	top := 62.0
	c.y = top + float64(len(rowEnds))*14 + 6

	// Lanes; their backgrounds first so bands and markers lie over them.
	lanesTop := c.y
	var body bytes.Buffer
	c.b = &body
	c.holderLanes(in.Timeline.Holders)
	c.etcdLanes(in.Timeline.Etcd)
	c.machineLanes(in.Timeline.Events)
	c.clientLanes(in.Samples)
	lanesBottom := c.y
	c.b = &b

	// Replacement rounds as bands behind the lanes.
	for _, rs := range roundSpans(in.Timeline.Events, c.t1) {
		x0, x1 := c.x(rs.from), c.x(rs.to)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fff3c4" opacity="0.6"><title>%s</title></rect>`+"\n",
			x0, lanesTop-4, math.Max(x1-x0, 1), lanesBottom-lanesTop+4, esc(rs.machine))
		c.text(x0+2, lanesBottom+12, rs.machine, `font-size="10" fill="#8a6d00"`)
	}
	b.Write(body.Bytes())

	// Step markers over everything.
	for i, e := range steps {
		sx := c.x(e.At)
		ly := top + float64(stepRow[i])*14 + 10
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1" stroke-dasharray="3,3"/>`+"\n",
			sx, ly+2, sx, lanesBottom)
		if sx+3+float64(len(e.Text))*charWidth > svgWidth {
			c.text(sx-3, ly, e.Text, `font-size="11" class="step" text-anchor="end"`) // near the right edge
		} else {
			c.text(sx+3, ly, e.Text, `font-size="11" class="step"`)
		}
	}

	// Time axis.
	axisY := lanesBottom + 22
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#000"/>`+"\n", plotLeft, axisY, plotRight, axisY)
	span := c.t1.Sub(c.t0).Seconds()
	step := niceStep(span / 12)
	for s := 0.0; s <= span+1e-9; s += step {
		tx := plotLeft + s/span*(plotRight-plotLeft)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`+"\n", tx, axisY, tx, axisY+4)
		c.text(tx-6, axisY+16, trimFloat(s)+" s", `font-size="11"`)
	}
	c.text(12, axisY+4, "time since start", `font-size="11" fill="#444"`)

	// Legend.
	ly := axisY + 36
	lx := float64(plotLeft)
	legend := []struct{ fill, label string }{
		{okColour, "requests answered"}, {failColour, "failed requests"}, {resetColour, "stream reset, reopened"}, {"#fd8d3c", "≥2 VIP holders"}, {"#bdbdbd", "no VIP holder"},
		{phaseColour["Provisioning"], "Provisioning"}, {phaseColour["Running"], "Running"}, {phaseColour["Deleting"], "Deleting"},
		{"url(#hook)", "pre-drain hook held"}, {"#fff3c4", "replacement round"},
	}
	if len(in.Timeline.Etcd) > 0 {
		legend = append(legend, etcdLegend...)
	}
	for _, l := range legend {
		if w := 16 + float64(len(l.label))*charWidth; lx+w > svgWidth-8 {
			lx, ly = float64(plotLeft), ly+18 // wrap
		}
		fmt.Fprintf(&b, `<rect class="legend" x="%.1f" y="%.1f" width="12" height="10" fill="%s" stroke="#999" stroke-width="0.5"/>`+"\n", lx, ly-9, l.fill)
		c.text(lx+16, ly, l.label, `font-size="11"`)
		lx += 16 + float64(len(l.label))*charWidth + 14
	}
	height := ly + 14

	if _, err := fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif">`+"\n",
		svgWidth, height, svgWidth, height); err != nil {
		return err
	}
	fmt.Fprintf(w, `<defs><pattern id="hook" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="none"/><line x1="0" y1="0" x2="0" y2="6" stroke="#000" stroke-width="2" opacity="0.45"/></pattern></defs>`+"\n")
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	_, err := io.WriteString(w, "</svg>\n")
	return err
}

// canvas maps times to x and stacks lanes downwards.
type canvas struct {
	b      *bytes.Buffer
	t0, t1 time.Time
	y      float64
}

func newCanvas(in Input) *canvas {
	var t0, t1 time.Time
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t0.IsZero() || t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	see(in.From)
	see(in.To)
	for _, s := range in.Samples {
		see(s.At)
	}
	for _, h := range in.Timeline.Holders {
		see(h.At)
	}
	for _, e := range in.Timeline.Etcd {
		see(e.At)
	}
	for _, e := range in.Timeline.Events {
		see(e.At)
	}
	if t0.IsZero() {
		t0 = time.Unix(0, 0)
	}
	if t1.Sub(t0) < time.Second {
		t1 = t0.Add(time.Second)
	}
	return &canvas{t0: t0, t1: t1}
}

func (c *canvas) x(t time.Time) float64 {
	f := float64(t.Sub(c.t0)) / float64(c.t1.Sub(c.t0))
	return plotLeft + math.Max(0, math.Min(1, f))*(plotRight-plotLeft)
}

func (c *canvas) text(x, y float64, s, attrs string) {
	fmt.Fprintf(c.b, `<text x="%.1f" y="%.1f" %s>%s</text>`+"\n", x, y, attrs, esc(s))
}

// header starts a section of lanes.
func (c *canvas) header(s string) {
	c.y += 6
	c.text(8, c.y+13, s, `font-size="12" font-weight="bold"`)
	c.y += headHeight
}

// lane draws a labelled lane's background and returns its top.
func (c *canvas) lane(label, class string) float64 {
	top := c.y
	c.text(16, top+laneHeight-5, label, `font-size="11" class="lane-label"`)
	fmt.Fprintf(c.b, `<rect class="%s" x="%d" y="%.1f" width="%d" height="%d" fill="#f4f4f4"/>`+"\n",
		class, plotLeft, top, plotRight-plotLeft, laneHeight)
	c.y += laneHeight + laneGap
	return top
}

func (c *canvas) bar(from, to time.Time, top float64, fill, extra, tip string) {
	x0, x1 := c.x(from), c.x(to)
	fmt.Fprintf(c.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"%s>`, x0, top, math.Max(x1-x0, 1), laneHeight, fill, extra)
	if tip != "" {
		fmt.Fprintf(c.b, `<title>%s</title>`, esc(tip))
	}
	c.b.WriteString("</rect>\n")
}

func (c *canvas) holderLanes(hs []HolderSample) {
	if len(hs) == 0 {
		return
	}
	c.header("VIP held by")
	set := map[string]bool{}
	for _, h := range hs {
		for _, n := range h.Holders {
			set[n] = true
		}
	}
	nodes := sortedKeys(set)
	for i, n := range nodes {
		top := c.lane(n, "holder-lane")
		for _, s := range holderRuns(hs, c.t1, func(h HolderSample) bool { return slices.Contains(h.Holders, n) }) {
			c.bar(s.from, s.to, top, nodePalette[i%len(nodePalette)], ` class="held"`,
				fmt.Sprintf("%s held the VIP %.3f–%.3f s", n, s.from.Sub(c.t0).Seconds(), s.to.Sub(c.t0).Seconds()))
		}
	}
	top := c.lane("holders ≠ 1", "holder-lane")
	for _, s := range holderRuns(hs, c.t1, func(h HolderSample) bool { return len(h.Holders) >= 2 }) {
		c.bar(s.from, s.to, top, "#fd8d3c", ` class="dual"`, fmt.Sprintf("%.0f ms with ≥2 holders", float64(s.to.Sub(s.from))/1e6))
	}
	for _, s := range holderRuns(hs, c.t1, func(h HolderSample) bool { return len(h.Holders) == 0 }) {
		c.bar(s.from, s.to, top, "#bdbdbd", ` class="none"`, fmt.Sprintf("%.0f ms without a holder", float64(s.to.Sub(s.from))/1e6))
	}
}

// holderRuns are the stretches in which the samples satisfy cond, each up to
// the next sample (end for the last).
func holderRuns(hs []HolderSample, end time.Time, cond func(HolderSample) bool) []span {
	var out []span
	in := false
	for i, h := range hs {
		match := h.Err == "" && cond(h)
		switch {
		case match && !in:
			out = append(out, span{from: h.At, to: h.At})
			in = true
		case !match && in:
			out[len(out)-1].to = h.At
			in = false
		}
		if in {
			next := end
			if i+1 < len(hs) {
				next = hs[i+1].At
			}
			out[len(out)-1].to = next
		}
	}
	return out
}

func (c *canvas) machineLanes(evs []Event) {
	var machines []string
	seen := map[string]bool{}
	for _, e := range evs {
		if e.Machine != "" && !seen[e.Machine] {
			seen[e.Machine] = true
			machines = append(machines, e.Machine)
		}
	}
	if len(machines) == 0 {
		return
	}
	c.header("Machines")
	holds, _ := hookHolds(evs, c.t1)
	for _, m := range machines {
		top := c.lane(m, "machine-lane")
		var cur *Event
		flush := func(to time.Time) {
			if cur == nil || gonePhases[cur.Phase] {
				return
			}
			fill, ok := phaseColour[cur.Phase]
			if !ok {
				fill = "#c6dbef"
			}
			c.bar(cur.At, to, top, fill, ` class="phase"`, m+": "+cur.Phase)
			if x0, x1 := c.x(cur.At), c.x(to); x1-x0 > float64(len(cur.Phase))*charWidth+6 {
				c.text(x0+3, top+laneHeight-5, cur.Phase, `font-size="10" fill="#222"`)
			}
		}
		for i := range evs {
			if e := &evs[i]; e.Machine == m && e.Type == EventPhase {
				flush(e.At)
				cur = e
			}
		}
		flush(c.t1)
		for _, h := range holds {
			if h.machine == m {
				tip := fmt.Sprintf("pre-drain hook held %.2f s", h.to.Sub(h.from).Seconds())
				if h.open {
					tip += " (never released)"
				}
				c.bar(h.from, h.to, top, "url(#hook)", ` class="hook" stroke="#000" stroke-width="0.5"`, tip)
			}
		}
	}
}

func (c *canvas) clientLanes(samples []Sample) {
	if len(samples) == 0 {
		return
	}
	c.header("Client on the VIP")
	// Bins of at least 100 ms and at least one pixel.
	bin := max(clientBin, time.Duration(float64(c.t1.Sub(c.t0))/(plotRight-plotLeft)))
	for _, k := range Kinds {
		type cell struct {
			ok, failed, reset int
			err               string
		}
		cells := map[int64]*cell{}
		seen := false
		for _, s := range samples {
			if s.Kind != k {
				continue
			}
			seen = true
			i := int64(s.At.Sub(c.t0) / bin)
			cl := cells[i]
			if cl == nil {
				cl = &cell{}
				cells[i] = cl
			}
			if s.Interrupted {
				cl.reset++
			} else if s.OK {
				cl.ok++
			} else {
				if cl.failed == 0 {
					cl.err = s.Err
				}
				cl.failed++
			}
		}
		if !seen {
			continue
		}
		label := map[Kind]string{Fresh: "new connections", Kept: "kept-alive conn.", Stream: "watch-like stream"}[k]
		top := c.lane(label, "client-lane")
		idx := make([]int64, 0, len(cells))
		for i := range cells {
			idx = append(idx, i)
		}
		sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
		// Consecutive bins with successes as one bar.
		for j := 0; j < len(idx); j++ {
			if cells[idx[j]].ok == 0 {
				continue
			}
			k := j
			for k+1 < len(idx) && idx[k+1] == idx[k]+1 && cells[idx[k+1]].ok > 0 {
				k++
			}
			from, to := c.t0.Add(time.Duration(idx[j])*bin), c.t0.Add(time.Duration(idx[k]+1)*bin)
			c.bar(from, to, top, okColour, ` class="ok"`, "")
			j = k
		}
		// Streams reset by a node that let the VIP go and reopened: marked, not failures.
		for _, i := range idx {
			if cl := cells[i]; cl.reset > 0 && cl.failed == 0 {
				x := c.x(c.t0.Add(time.Duration(i) * bin))
				fmt.Fprintf(c.b, `<rect class="reset" x="%.1f" y="%.1f" width="2" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
					x, top, laneHeight, resetColour, esc(fmt.Sprintf("%d %s reset and reopened", cl.reset, k)))
			}
		}
		// Failures last, at least 3 px wide and taller than the lane: impossible
		// to miss, yet not merged with the next lane's.
		for _, i := range idx {
			if cl := cells[i]; cl.failed > 0 {
				x := c.x(c.t0.Add(time.Duration(i) * bin))
				w := math.Max(c.x(c.t0.Add(time.Duration(i+1)*bin))-x, 3)
				fmt.Fprintf(c.b, `<rect class="fail" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
					x, top-2, w, laneHeight+4, failColour, esc(fmt.Sprintf("%d failed %s: %s", cl.failed, k, cl.err)))
			}
		}
	}
}

// roundSpans are the replacement rounds, labelled "round N" (in span.machine).
func roundSpans(evs []Event, end time.Time) []span {
	var out []span
	open := map[int]int{}
	for _, e := range evs {
		switch e.Type {
		case EventReplacementStart:
			open[e.Round] = len(out)
			out = append(out, span{machine: fmt.Sprintf("round %d", e.Round), from: e.At, to: end})
		case EventReplacementEnd:
			if i, ok := open[e.Round]; ok {
				out[i].to = e.At
				delete(open, e.Round)
			}
		}
	}
	return out
}

func eventsOf(evs []Event, t EventType) []Event {
	var out []Event
	for _, e := range evs {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

// niceStep rounds a tick interval up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func msOrNA(f *float64) string {
	if f == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f ms", *f)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
