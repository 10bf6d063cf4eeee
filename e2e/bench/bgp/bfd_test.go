//go:build linux

package bgpbench

import (
	"context"
	"math"
	"os/exec"
	"time"

	"github.com/caplb/caplb/e2e/lab/bgplab"
)

// Soak is the BFD soak's figures: sessions kept up with the CPUs busy.
type Soak struct {
	Seconds   float64 `json:"seconds"`
	BusyLoops int     `json:"busy_loops"`
	// BFDFlaps counts a member's BFD session leaving "up" at the router; FIBDrops the VIP's
	// route losing a next hop. Goal: both 0.
	BFDFlaps int `json:"bfd_flaps"`
	FIBDrops int `json:"fib_drops"`
}

// waitBFD waits until the router's BFD session to every member is up.
func (b *bench) waitBFD() {
	b.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		peers, err := b.c.FRR.BFDPeers(context.Background())
		up := 0
		for _, m := range b.c.Members {
			if err == nil && peers[m.IPv4] == "up" {
				up++
			}
		}
		if up == len(b.c.Members) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("BFD sessions not all up after %v: %v (%v)", settle, peers, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dropLink makes m's link drop every packet both ways, carrier up (nftables on the node's
// eth0: input and output), or undoes it: a powered-off node behind a switch, or a silently
// dead path. The router notices only through BFD or the hold timer.
func (b *bench) dropLink(m *bgplab.BGPMember, drop bool) error {
	ctx := context.Background()
	if !drop {
		_, err := m.NS.Run(ctx, "nft", "delete", "table", "inet", "caplbbench")
		return err
	}
	// One nft run, one transaction: the clock (started before the fault) then includes a
	// single process start, not five.
	_, err := m.NS.Run(ctx, "nft", "add table inet caplbbench; "+
		"add chain inet caplbbench in { type filter hook input priority -300; }; "+
		"add chain inet caplbbench out { type filter hook output priority -300; }; "+
		"add rule inet caplbbench in iifname eth0 drop; "+
		"add rule inet caplbbench out oifname eth0 drop")
	return err
}

// soak keeps two busy loops on the machine for d and counts BFD flaps and FIB drops.
func (b *bench) soak(d time.Duration) *Soak {
	const loops = 2
	s := &Soak{BusyLoops: loops}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for range loops {
		cmd := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			b.t.Fatal(err)
		}
		defer func() { _ = cmd.Wait() }()
	}
	b.mark("soak: %d busy loops for %v", loops, d)
	start := time.Now()
	wasUp := map[string]bool{}
	hops := len(b.c.Members)
	for ctx.Err() == nil {
		peers, err := b.c.FRR.BFDPeers(context.Background())
		if err == nil {
			for _, m := range b.c.Members {
				up := peers[m.IPv4] == "up"
				if wasUp[m.Name] && !up {
					s.BFDFlaps++
					b.mark("soak: BFD session to %s %s", m.Name, peers[m.IPv4])
				}
				wasUp[m.Name] = up
			}
		}
		if h, err := b.fib.NextHops(bgplab.HostPrefix(b.vip)); err == nil {
			if len(h) < hops {
				s.FIBDrops++
				b.mark("soak: the VIP's route has %d next hops", len(h))
			}
			hops = len(h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Seconds = math.Round(time.Since(start).Seconds())
	b.t.Logf("soak: %+v", *s)
	return s
}
