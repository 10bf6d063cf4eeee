package arp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// HandoverTable is the nftables table (family netdev) the new owner installs
// on the VIP's interface for the hand-over window.
const HandoverTable = "caplb_handover"

// handoverFlowTimeout is how long a flow that started here (its SYN arrived
// at this node) stays recorded; it only has to outlive the window.
const handoverFlowTimeout = 10 * time.Second

// errNFTMissing: the nft binary is not installed; hand-over runs without the
// redirect (a handshake straddling the cache flip can fail).
var errNFTMissing = errors.New("arp: nft binary not found")

// nftRunner applies an nft script (`nft -f -`). A struct field so that unit
// tests can record scripts instead of running them.
type nftRunner func(ctx context.Context, script string) error

// execNFT runs the nft binary.
func execNFT(ctx context.Context, script string) error {
	path, err := exec.LookPath("nft")
	if err != nil {
		// Service managers and images often leave sbin off PATH.
		for _, p := range []string{"/usr/sbin/nft", "/sbin/nft"} {
			if _, serr := os.Stat(p); serr == nil {
				path, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return errNFTMissing
	}
	cmd := exec.CommandContext(ctx, path, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("arp: nft -f -: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// handover makes a graceful hand-over lossless for TCP. When this node takes
// the VIPs over from a previous owner that still holds them (it drains for
// quiesce.drain after we announce), every TCP segment to a VIP that belongs
// to a flow we did not see start here (no SYN seen by us) is forwarded, at
// the interface's ingress, to the previous owner's node address: its kernel
// still has the VIP and the socket. That covers established connections and
// handshakes whose SYN went to the old owner before the neighbours' caches
// flipped (their ACK would otherwise get a RST from us). When the window
// ends the table is removed and everything is served here.
type handover struct {
	iface string
	log   logr.Logger
	run   nftRunner

	mu          sync.Mutex
	gen         uint64 // bumps on each start/stop so stale timers do nothing
	timer       *time.Timer
	active      bool
	warnedNoNFT bool
}

func newHandover(iface string, log logr.Logger, run nftRunner) *handover {
	if run == nil {
		run = execNFT
	}
	return &handover{iface: iface, log: log, run: run}
}

// handoverRuleset is the nft script that (re)creates the table. The leading
// "table …; delete table …" makes it replace any earlier table atomically.
func handoverRuleset(iface string, vips []netip.Addr, prev netip.Addr) string {
	fam, addrType, fwd := "ip", "ipv4_addr", "ip"
	if prev.Is6() {
		fam, addrType, fwd = "ip6", "ipv6_addr", "ip6"
	}
	var dst []string
	for _, v := range vips {
		if v.Is4() == prev.Is4() {
			dst = append(dst, v.String())
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table netdev %s\ndelete table netdev %s\n", HandoverTable, HandoverTable)
	fmt.Fprintf(&b, "table netdev %s {\n", HandoverTable)
	fmt.Fprintf(&b, "\tset flows {\n\t\ttype %s . inet_service\n\t\tflags timeout\n\t\tsize 65535\n\t}\n", addrType)
	fmt.Fprintf(&b, "\tchain ingress {\n\t\ttype filter hook ingress device %q priority -500; policy accept;\n", iface)
	match := fmt.Sprintf("%s daddr { %s } meta l4proto tcp", fam, strings.Join(dst, ", "))
	// A SYN without ACK starts a flow here: remember it and let it in.
	fmt.Fprintf(&b, "\t\t%s tcp flags & (syn | ack) == syn update @flows { %s saddr . tcp sport timeout %ds } accept\n",
		match, fam, int(handoverFlowTimeout/time.Second))
	// Any other segment of a flow not started here belongs to the old owner.
	fmt.Fprintf(&b, "\t\t%s %s saddr . tcp sport != @flows fwd %s to %s device %q\n", match, fam, fwd, prev, iface)
	b.WriteString("\t}\n}\n")
	return b.String()
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.run(ctx, handoverRuleset(h.iface, vips, prev)); err != nil {
		h.warn(err, "hand-over redirect not installed; a handshake straddling the hand-over may fail")
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Creating the table first makes the delete succeed whether or not it
	// existed, so a missing table is not an error.
	err := h.run(ctx, fmt.Sprintf("table netdev %s\ndelete table netdev %s\n", HandoverTable, HandoverTable))
	if err != nil {
		h.warn(err, "removing the hand-over redirect failed")
		return
	}
	if h.active {
		h.log.Info("hand-over redirect removed", "interface", h.iface, "reason", reason)
	}
	h.active = false
}

// warn logs err; a missing nft binary only once.
func (h *handover) warn(err error, msg string) {
	if errors.Is(err, errNFTMissing) {
		if !h.warnedNoNFT {
			h.warnedNoNFT = true
			h.log.Info("nft not installed: graceful hand-over runs without the TCP redirect (install nftables for loss-free hand-over)")
		}
		return
	}
	h.log.Error(err, msg, "interface", h.iface)
}
