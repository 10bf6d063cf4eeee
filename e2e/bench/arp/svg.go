//go:build linux

package main

import (
	"bytes"
	"fmt"
	"html"
	"slices"
	"time"
)

var palette = []string{"#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf"}

// renderSVG draws one trial: per node, when its kernel held the VIP; below,
// every client connect at its start time, coloured by the node that answered
// (red cross: failed); vertical lines at the fault and at the first answer
// from the new owner.
func renderSVG(d *trialData) []byte {
	const (
		left, right, top = 170.0, 30.0, 60.0
		width, rowH      = 1100.0, 34.0
	)
	from := d.T0.Add(-300 * time.Millisecond)
	to := from
	for _, a := range d.Attempts {
		if a.Start.After(to) {
			to = a.Start
		}
	}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 { return left + (width-left-right)*t.Sub(from).Seconds()/span }
	rows := len(d.Nodes) + 1
	height := top + rowH*float64(rows) + 90
	color := func(node string) string {
		i := slices.Index(d.Nodes, node)
		if i < 0 {
			return "#444"
		}
		return palette[i%len(palette)]
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="13">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="16" font-weight="bold">%s ARP failover, scenario %s: fault on %s, new owner %s after %.0f ms</text>`+"\n",
		left, html.EscapeString(d.Daemon), html.EscapeString(d.Scenario), d.Old, d.New, ms(d.First.Sub(d.T0)))
	fmt.Fprintf(&b, `<text x="%.0f" y="42" fill="#555">bars: the node's kernel holds the VIP; ticks: client connects to VIP:6443 (colour = node that answered, red cross = failed)</text>`+"\n", left)
	for i, n := range d.Nodes {
		y := top + rowH*float64(i)
		fmt.Fprintf(&b, `<text x="10" y="%.0f">VIP on %s</text>`+"\n", y+rowH/2+4, n)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#ddd"/>`+"\n", left, width-right, y+rowH/2, y+rowH/2)
		var start time.Time
		flush := func(end time.Time) {
			if !start.IsZero() {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s" opacity="0.8"/>`+"\n",
					x(start), y+6, max(x(end)-x(start), 1), rowH-12, color(n))
				start = time.Time{}
			}
		}
		for _, s := range d.Samples {
			held := slices.Contains(s.Holders, n)
			if held && start.IsZero() {
				start = s.At
			} else if !held {
				flush(s.At)
			}
		}
		flush(to)
	}
	y := top + rowH*float64(len(d.Nodes))
	fmt.Fprintf(&b, `<text x="10" y="%.0f">client connects</text>`+"\n", y+rowH/2+4)
	for _, a := range d.Attempts {
		if a.Node != "" {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="1.5"/>`+"\n", x(a.Start), x(a.Start), y+6, y+rowH-6, color(a.Node))
		} else {
			cx, cy := x(a.Start), y+rowH/2
			fmt.Fprintf(&b, `<path d="M%.1f %.1f l6 6 m0 -6 l-6 6" stroke="#d62728" stroke-width="1.5" transform="translate(-3 -3)"/>`+"\n", cx, cy)
		}
	}
	// Axis: ticks every 100 ms relative to the fault.
	axisY := top + rowH*float64(rows) + 10
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#000"/>`+"\n", left, width-right, axisY, axisY)
	for t := -300 * time.Millisecond; d.T0.Add(t).Before(to); t += 100 * time.Millisecond {
		tx := x(d.T0.Add(t))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#000"/>`+"\n", tx, tx, axisY, axisY+5)
		if (t/(100*time.Millisecond))%2 == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" font-size="11">%+d ms</text>`+"\n", tx, axisY+18, t.Milliseconds())
		}
	}
	for _, m := range []struct {
		t     time.Time
		label string
		col   string
	}{
		{d.T0, "fault", "#d62728"},
		{d.First, fmt.Sprintf("first answer from %s", d.New), "#000"},
	} {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x(m.t), x(m.t), top-6, axisY, m.col)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="%s" font-size="12">%s</text>`+"\n", x(m.t)+4, axisY+36, m.col, html.EscapeString(m.label))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#555" font-size="11">time relative to the fault</text>`+"\n", left, axisY+56)
	b.WriteString("</svg>\n")
	return b.Bytes()
}
