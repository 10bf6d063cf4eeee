package arp

import (
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// HandoverTable is the nftables table (family ip or ip6) the new owner
// installs for the hand-over window.
const HandoverTable = "caplb_handover"

// QuietTable is the nftables table (families arp and ip6) a quiet owner
// installs so that its kernel stops answering ARP and neighbour
// solicitations for the VIPs it still holds while it drains.
const QuietTable = "caplb_quiet"

// handoverFlowTimeout is how long a flow that started here (its SYN arrived
// at this node) stays recorded; it only has to outlive the window.
const handoverFlowTimeout = 10 * time.Second

// tables programs the kernel's packet filter (nftables over netlink on
// Linux; a struct field so that unit tests can record calls instead).
type tables interface {
	installHandover(iface string, vips []netip.Addr, prev netip.Addr) error
	removeHandover() error
	installQuiet(vips []netip.Addr) error
	removeQuiet() error
}

// handover makes a graceful hand-over lossless for TCP. When this node takes
// the VIPs over from a previous owner that still holds them (it drains for
// quiesce.drain after we announce), every TCP segment to a VIP that belongs
// to a flow we did not see start here (no SYN seen by us) is sent on, before
// conntrack, to the previous owner's node address: its kernel still has the
// VIP and the socket. That covers established connections and handshakes
// whose SYN went to the old owner before the neighbours' caches flipped
// (their ACK would otherwise get a RST from us). When the window ends the
// table is removed and everything is served here.
type handover struct {
	iface string
	log   logr.Logger
	t     tables

	mu     sync.Mutex
	gen    uint64 // bumps on each start/stop so stale timers do nothing
	timer  *time.Timer
	active bool
}

func newHandover(iface string, log logr.Logger, t tables) *handover {
	return &handover{iface: iface, log: log, t: t}
}

// start installs (or replaces) the redirect for window.
func (h *handover) start(vips []netip.Addr, prev netip.Addr, window time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hasFamily := false
	for _, v := range vips {
		hasFamily = hasFamily || v.Is4() == prev.Is4()
	}
	if !prev.IsValid() || !hasFamily {
		return
	}
	h.gen++
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if err := h.t.installHandover(h.iface, vips, prev); err != nil {
		h.log.Error(err, "hand-over redirect not installed; a handshake straddling the hand-over may fail", "interface", h.iface)
		return
	}
	h.active = true
	h.log.Info("hand-over redirect installed: flows not started here go to the previous owner",
		"previousOwner", prev.String(), "interface", h.iface, "window", window.String())
	gen := h.gen
	h.timer = time.AfterFunc(window, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.gen == gen {
			h.removeLocked("window over")
		}
	})
}

// stop removes the redirect (and a leftover from an earlier run); safe to
// call any time.
func (h *handover) stop(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.removeLocked(reason)
}

// release removes the redirect if this process installed it (cheap when
// not: Sync calls it on every resync of a node that holds nothing).
func (h *handover) release(reason string) {
	h.mu.Lock()
	active := h.active
	h.mu.Unlock()
	if active {
		h.stop(reason)
	}
}

func (h *handover) removeLocked(reason string) {
	if err := h.t.removeHandover(); err != nil {
		h.log.Error(err, "removing the hand-over redirect failed", "interface", h.iface)
		return
	}
	if h.active {
		h.log.Info("hand-over redirect removed", "interface", h.iface, "reason", reason)
	}
	h.active = false
}
