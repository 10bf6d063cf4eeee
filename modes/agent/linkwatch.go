package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkHoldDown: after the VIP interface comes back up, the member stays
// ineligible this long, so that a flapping link does not take the VIP back
// from the member that took over (or pull it from the others while they
// have not noticed yet): the others detect a failure in well under a second.
const linkHoldDown = time.Second

// linkWatch follows the VIP interface's state through netlink link
// notifications (issue 8 item 8, keepalived's track_interface): while it is
// down (administratively, or no carrier) the member is not eligible and an
// owner releases at once, since no successor can be reached to hand over
// to. A nil *linkWatch reports the link up.
type linkWatch struct {
	mu      sync.Mutex
	isDown  bool
	upSince time.Time
}

func (w *linkWatch) down() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isDown
}

// up: the link is up and has been for linkHoldDown (or since the start).
func (w *linkWatch) up(now time.Time) bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.isDown && (w.upSince.IsZero() || now.Sub(w.upSince) >= linkHoldDown)
}

// set records a state; it reports whether it changed.
func (w *linkWatch) set(isUp bool, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if isUp == !w.isDown {
		return false
	}
	w.isDown = !isUp
	if isUp {
		w.upSince = now
	}
	return true
}

// linkUp: administratively up and running (carrier).
func linkUp(a *netlink.LinkAttrs) bool {
	return a.Flags&net.FlagUp != 0 && a.RawFlags&unix.IFF_RUNNING != 0
}

// startLinkWatch subscribes to link notifications for ifName (in this
// process's network namespace) and calls wake on every change of its state.
// It stops when ctx ends.
func startLinkWatch(ctx context.Context, ifName string, wake func(), log logr.Logger) (*linkWatch, error) {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("link watch: interface %q: %w", ifName, err)
	}
	w := &linkWatch{isDown: !linkUp(link.Attrs())}
	index := link.Attrs().Index
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	err = netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { log.Error(err, "link watch: netlink subscription failed", "interface", ifName) },
	})
	if err != nil {
		return nil, fmt.Errorf("link watch: subscribe to link updates: %w", err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				a := u.Attrs()
				if a.Index != index {
					continue
				}
				isUp := linkUp(a) && u.Header.Type != unix.RTM_DELLINK
				if w.set(isUp, time.Now()) {
					log.Info("VIP interface state", "interface", ifName, "up", isUp)
					wake()
				}
			}
		}
	}()
	if w.isDown {
		log.Info("VIP interface is down at start", "interface", ifName)
	}
	return w, nil
}
