//go:build linux

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/vishvananda/netlink"

	"github.com/caplb/caplb/e2e/lifecycle/observe"
)

// The ARP watcher is the segment's own witness of who answers for the VIP: a station beside the
// client (its own namespace and address, so that the client's neighbour entry is left to the
// client) asks who has the VIP every round, as a client whose entry went stale does, and records
// every ARP packet that claims the VIP — the answers and any gratuitous ARP — by the machine
// whose interface sent it. A round in which two machines claimed the VIP is two MACs answering
// for one address: what a client may then pick up. The holders sampled from the machines'
// kernels (Holders) say who has the address; this says who answers on the wire.

// arpRound is how often the watcher asks: short enough to see a duplicate of a few tens of ms,
// long enough that an answer delayed by a loaded machine still falls in the round that asked.
const arpRound = 20 * time.Millisecond

// arpWatch records the rounds of one watcher.
type arpWatch struct {
	l  *Lab
	mu sync.Mutex
	// rounds are the samples so far: one per round, its Holders the machines that claimed the
	// VIP in it (sorted; unknown MACs as "mac:<addr>").
	rounds []observe.HolderSample
	cur    map[string]bool
	macs   map[string]string // hardware address -> machine name
}

// WatchARP asks who has the VIP every arpRound from the watcher station until ctx ends, and
// returns the rounds (each a HolderSample whose Holders are the machines that claimed the VIP in
// it) once it ended. ARP labs only.
func (l *Lab) WatchARP(ctx context.Context) (func() []observe.HolderSample, error) {
	if l.topo.watcher == nil {
		return nil, errors.New("the ARP watcher runs in ARP labs only")
	}
	var c *arp.Client
	if err := l.topo.watcher.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	}); err != nil {
		return nil, fmt.Errorf("the ARP watcher's socket: %w", err)
	}
	w := &arpWatch{l: l, cur: map[string]bool{}, macs: map[string]string{}}
	vip := l.vip
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			p, _, err := c.Read()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				var sock *net.OpError
				if errors.As(err, &sock) {
					// The socket failed: every next Read would too. Its rounds from here on
					// hear nobody, and the goals judge a silent wire as a miss.
					l.net.Logf("arpwatch", "the ARP watcher stopped reading: %v", err)
					return
				}
				continue // a malformed frame
			}
			if p.SenderIP == vip {
				w.claimed(p.SenderHardwareAddr)
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer c.Close() // ends the reader's Read
		t := time.NewTicker(arpRound)
		defer t.Stop()
		for {
			w.nextRound(time.Now())
			if req, err := arp.NewPacket(arp.OperationRequest, c.HardwareAddr(), arpWatcher, ethernet.Broadcast, vip); err == nil {
				_ = c.WriteTo(req, ethernet.Broadcast)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() []observe.HolderSample {
		wg.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.closeRound()
		return w.rounds
	}, nil
}

// nextRound closes the current round and opens one at now.
func (w *arpWatch) nextRound(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeRound()
	w.rounds = append(w.rounds, observe.HolderSample{At: now})
}

// closeRound writes the current round's claimers into its sample; called with w.mu held.
func (w *arpWatch) closeRound() {
	if len(w.rounds) == 0 {
		return
	}
	last := &w.rounds[len(w.rounds)-1]
	for name := range w.cur {
		last.Holders = append(last.Holders, name)
	}
	sort.Strings(last.Holders)
	clear(w.cur)
}

// claimed records that mac claimed the VIP in the current round.
func (w *arpWatch) claimed(mac net.HardwareAddr) {
	name := w.machineOf(mac)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur[name] = true
}

// machineOf names the machine whose interface has mac (looked up among the running machines
// the first time it is seen: a machine that answers is running).
func (w *arpWatch) machineOf(mac net.HardwareAddr) string {
	key := mac.String()
	w.mu.Lock()
	name, ok := w.macs[key]
	w.mu.Unlock()
	if ok {
		return name
	}
	name = "mac:" + key
	for _, n := range w.l.Nodes() {
		if m, err := n.hardwareAddr(); err == nil && m.String() == key {
			name = n.Name
			break
		}
	}
	w.mu.Lock()
	w.macs[key] = name
	w.mu.Unlock()
	return name
}

// hardwareAddr is the machine's eth0 MAC.
func (n *Node) hardwareAddr() (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := n.NS.WithRouteNetlink(func(h *netlink.Handle) error {
		link, err := h.LinkByName("eth0")
		if err != nil {
			return fmt.Errorf("%s: eth0: %w", n.Name, err)
		}
		mac = link.Attrs().HardwareAddr
		return nil
	})
	return mac, err
}
