//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
)

// arpProber sends RFC 5227 style probes (ARP requests from 0.0.0.0 for the
// VIP) and listens for an answer or a competing probe.
type arpProber struct {
	ifName string
	// count probes, interval apart; then listen for wait more.
	count    int
	interval time.Duration
	wait     time.Duration
}

func newARPProber(ifName string) *arpProber {
	return &arpProber{ifName: ifName, count: 3, interval: 100 * time.Millisecond, wait: 200 * time.Millisecond}
}

func (p *arpProber) probe(vips []netip.Addr) (probeResult, error) {
	var v4 []netip.Addr
	for _, v := range vips {
		if v.Is4() {
			v4 = append(v4, v)
		}
	}
	if len(v4) == 0 {
		// IPv6 only: the kernel's duplicate address detection covers the
		// address once added; there is no ARP to probe with.
		return probeResult{}, nil
	}
	ifi, err := net.InterfaceByName(p.ifName)
	if err != nil {
		return probeResult{}, fmt.Errorf("interface %s: %w", p.ifName, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	if err != nil {
		return probeResult{}, fmt.Errorf("ARP socket on %s: %w", p.ifName, err)
	}
	c, err := arp.New(ifi, conn)
	if err != nil {
		_ = conn.Close()
		return probeResult{}, fmt.Errorf("ARP client on %s: %w", p.ifName, err)
	}
	defer c.Close()
	want := map[netip.Addr]bool{}
	for _, v := range v4 {
		want[v] = true
	}
	res := probeResult{}
	deadline := time.Now().Add(time.Duration(p.count-1)*p.interval + p.wait)
	nextSend := time.Now()
	sent := 0
	for time.Now().Before(deadline) && !res.answered && !res.competing {
		if sent < p.count && !time.Now().Before(nextSend) {
			for _, v := range v4 {
				pkt, err := arp.NewPacket(arp.OperationRequest, ifi.HardwareAddr, netip.IPv4Unspecified(), ethernet.Broadcast, v)
				if err != nil {
					return res, err
				}
				if err := c.WriteTo(pkt, ethernet.Broadcast); err != nil {
					return res, fmt.Errorf("send ARP probe: %w", err)
				}
			}
			sent++
			nextSend = time.Now().Add(p.interval)
		}
		until := nextSend
		if sent >= p.count || deadline.Before(until) {
			until = deadline
		}
		_ = c.SetReadDeadline(until)
		pkt, _, err := c.Read()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Not an ARP packet we can parse: keep listening.
			continue
		}
		if pkt.SenderHardwareAddr.String() == ifi.HardwareAddr.String() {
			continue
		}
		switch {
		case want[pkt.SenderIP]:
			res.answered = true
		case pkt.Operation == arp.OperationRequest && (!pkt.SenderIP.IsValid() || pkt.SenderIP == netip.IPv4Unspecified()):
			if want[pkt.TargetIP] {
				res.competing = true
			}
		}
	}
	return res, nil
}
