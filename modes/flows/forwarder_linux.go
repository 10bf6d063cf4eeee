//go:build linux

package flows

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Forwarder holds the nftables tables (table ip caplb_flows, table ip6 caplb_flows) that send
// other members' flows on to their owner. It acts in the network namespace NewForwarder was
// called in, whichever goroutine calls it later. Safe for concurrent use.
//
// A segment is sent on only when no local socket could take it but a listener on the wildcard
// address: a server listening on the VIP itself (not on 0.0.0.0 or [::]) takes, and resets,
// every rehashed segment, as if there were no Forwarder.
type Forwarder struct {
	mu     sync.Mutex
	ns     netns.NsHandle
	cfg    ForwarderConfig
	closed bool
	// owners is what the maps hold, as last applied; dirty: a batch failed, so the maps may hold
	// something else, and the next Set rewrites them whole.
	owners map[Flow]netip.Addr
	dirty  bool
	// vips is what the VIP sets hold, as last applied; peers what held segments are copied to.
	vips  []netip.Addr
	peers []netip.Addr
}

// NewForwarder creates both tables, replacing any left by an earlier run, with empty maps.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("flows: opening this network namespace: %w", err)
	}
	f := &Forwarder{ns: ns, cfg: cfg.withDefaults(), owners: map[Flow]netip.Addr{}}
	c, err := f.conn(0)
	if err == nil {
		for _, fm := range bothFamilies() {
			if err = fm.create(c, f.cfg); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		_ = ns.Close()
		return nil, fmt.Errorf("flows: creating tables ip and ip6 %s: %w", Table, err)
	}
	return f, nil
}

// conn returns an nftables connection in the forwarder's namespace whose socket buffers can
// carry a batch of about batchBytes (0: the default buffers).
func (f *Forwarder) conn(batchBytes int) (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	// Entering a namespace takes CAP_SYS_ADMIN, which the agent does not have (NET_ADMIN and
	// NET_RAW only): only a caller in another namespace than the forwarder's (a test) goes there.
	if cur, err := netns.Get(); err != nil || !cur.Equal(f.ns) {
		opts = append(opts, nftables.WithNetNSFd(int(f.ns)))
		if err == nil {
			_ = cur.Close()
		}
	} else {
		_ = cur.Close()
	}
	if batchBytes > defaultSockBuf/2 {
		opts = append(opts, nftables.WithSockOptions(forceBuffers(batchBytes)))
	}
	return nftables.New(opts...)
}

// Set makes the maps hold exactly owners (flow -> the member that terminates it), in one netlink
// batch: the elements that go and come, or, after a failed batch, a flush and every element, so
// that an unchanged entry is never missing. Unchanged owners make no batch at all. A flow whose
// owner is of another family, or a malformed flow, is skipped and named in the returned error;
// the rest is still applied.
func (f *Forwarder) Set(owners map[Flow]netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("flows: forwarder is closed")
	}
	want, skipped := validOwners(owners)
	var del, add []Flow
	if !f.dirty {
		for fl, o := range f.owners {
			if w, ok := want[fl]; !ok || w != o {
				del = append(del, fl)
			}
		}
	}
	for fl, o := range want {
		if cur, ok := f.owners[fl]; f.dirty || !ok || cur != o {
			add = append(add, fl)
		}
	}
	if !f.dirty && len(del) == 0 && len(add) == 0 {
		return skipped
	}
	slices.SortFunc(del, compareFlows)
	slices.SortFunc(add, compareFlows)
	c, err := f.conn(batchSize(len(del) + len(add)))
	if err != nil {
		return errors.Join(fmt.Errorf("flows: nftables: %w", err), skipped)
	}
	for _, fm := range bothFamilies() {
		set := fm.ownersMap(fm.table())
		if f.dirty {
			c.FlushSet(set)
		}
		if err = queueElems(c.SetDeleteElements, set, fm, del, nil); err == nil {
			err = queueElems(c.SetAddElements, set, fm, add, want)
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		f.dirty = true
		return errors.Join(fmt.Errorf("flows: updating the owner maps (%d entries out, %d in): %w", len(del), len(add), err), skipped)
	}
	f.owners, f.dirty = want, false
	return skipped
}

// validOwners normalizes owners (IPv4-mapped addresses as IPv4) and leaves out what cannot be
// applied, reporting it.
func validOwners(owners map[Flow]netip.Addr) (map[Flow]netip.Addr, error) {
	want := make(map[Flow]netip.Addr, len(owners))
	var bad []string
	for fl, o := range owners {
		n, ok := normalize(fl)
		o = o.Unmap().WithZone("")
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s -> %s (malformed flow)", fl.Client, fl.Service))
		case !o.IsValid() || o.Is4() != n.Service.Addr().Is4():
			bad = append(bad, fmt.Sprintf("%s -> %s (owner %s of another family)", fl.Client, fl.Service, o))
		default:
			want[n] = o
		}
	}
	if len(bad) == 0 {
		return want, nil
	}
	slices.Sort(bad)
	const shown = 5
	n, more := len(bad), ""
	if n > shown {
		more = fmt.Sprintf(" and %d more", n-shown)
		bad = bad[:shown]
	}
	return want, fmt.Errorf("flows: skipped %d flows: %s%s", n, strings.Join(bad, ", "), more)
}

// elemsPerMessage keeps one message's element list within a netlink attribute (64 KiB): an IPv6
// element takes about 100 bytes.
const elemsPerMessage = 512

// queueElems queues op (add or delete) for the flows of fm's family, in messages of at most
// elemsPerMessage elements; owners gives each element's value (nil: keys only).
func queueElems(op func(*nftables.Set, []nftables.SetElement) error, set *nftables.Set, fm family, flows []Flow, owners map[Flow]netip.Addr) error {
	var elems []nftables.SetElement
	for _, fl := range flows {
		if fl.Service.Addr().Is4() != (fm.nft == nftables.TableFamilyIPv4) {
			continue
		}
		e := nftables.SetElement{Key: elemKey(fl)}
		if owners != nil {
			e = elem(fl, owners[fl])
		}
		elems = append(elems, e)
	}
	for chunk := range slices.Chunk(elems, elemsPerMessage) {
		if err := op(set, chunk); err != nil {
			return fmt.Errorf("map %s %s %s: %w", fm.name, Table, fm.mapName, err)
		}
	}
	return nil
}

// canonicalAddrs sorts addrs as the kernel compares them, IPv4-mapped ones as IPv4, without
// zones or repeats.
func canonicalAddrs(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Unmap().WithZone(""))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// SetVIPs makes the VIP sets hold exactly vips: only segments to them are sent on or held. The
// caller keeps it to the VIPs on the node (announced, or withdrawn and still held).
func (f *Forwarder) SetVIPs(vips []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("flows: forwarder is closed")
	}
	want := canonicalAddrs(vips)
	if slices.Equal(want, f.vips) && f.vips != nil {
		return nil
	}
	c, err := f.conn(0)
	if err != nil {
		return fmt.Errorf("flows: nftables: %w", err)
	}
	for _, fm := range bothFamilies() {
		set := fm.vipsSet(fm.table())
		c.FlushSet(set)
		var elems []nftables.SetElement
		for _, v := range want {
			if v.Is4() == (fm.nft == nftables.TableFamilyIPv4) {
				elems = append(elems, nftables.SetElement{Key: v.AsSlice()})
			}
		}
		if len(elems) > 0 {
			if err := c.SetAddElements(set, elems); err != nil {
				return fmt.Errorf("flows: set %s %s %s: %w", fm.name, Table, fm.vipsName, err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("flows: updating the VIP sets: %w", err)
	}
	f.vips = want
	return nil
}

// SetPeers makes the forwarder copy a held segment (a connection nobody here knows yet), marked,
// to each of peers: the members' node addresses, on-link like owners. Empty: held segments are
// only dropped until a list names their owner.
func (f *Forwarder) SetPeers(peers []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("flows: forwarder is closed")
	}
	want := canonicalAddrs(peers)
	if slices.Equal(want, f.peers) {
		return nil
	}
	c, err := f.conn(0)
	if err != nil {
		return fmt.Errorf("flows: nftables: %w", err)
	}
	for _, fm := range bothFamilies() {
		t := fm.table()
		ch := chains{spray: &nftables.Chain{Table: t, Name: sprayChain}, tooMany: &nftables.Chain{Table: t, Name: tooManyChain}}
		c.FlushChain(ch.spray)
		for _, r := range fm.sprayRules(t, ch, f.cfg, want) {
			c.AddRule(r)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("flows: updating the peers held segments are copied to: %w", err)
	}
	f.peers = want
	return nil
}

// Forwarded is how many packets the forwarder has sent on so far (the counters of both tables),
// for a metric. It is 0 when the counters cannot be read.
func (f *Forwarder) Forwarded() uint64 { return f.count(ownerChain)[0] }

// Held is how many segments of connections nobody here knew were dropped rather than reset
// while their owner's list was awaited (HoldUnknown), copied to the peers or not.
func (f *Forwarder) Held() uint64 {
	n := f.count(sprayChain, tooManyChain)
	return n[0] + n[1]
}

// HoldFull is how many of the held segments found the held or seen set full: held all the same,
// for longer than HoldUnknown (until their owner's list names them or the sets have room).
func (f *Forwarder) HoldFull() uint64 { return f.count(unknownChain)[0] }

// CopiesLimited is how many held segments were not copied to the peers: over the copy rate.
func (f *Forwarder) CopiesLimited() uint64 { return f.count(tooManyChain)[0] }

// count sums the packet counters of each chain in both tables; 0 when they cannot be read.
func (f *Forwarder) count(chains ...string) []uint64 {
	out := make([]uint64, len(chains))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return out
	}
	c, err := f.conn(0)
	if err != nil {
		return out
	}
	for i, chain := range chains {
		for _, fm := range bothFamilies() {
			rules, err := c.GetRules(fm.table(), &nftables.Chain{Name: chain})
			if err != nil {
				continue
			}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if ctr, ok := e.(*expr.Counter); ok {
						out[i] += ctr.Packets
					}
				}
			}
		}
	}
	return out
}

// Close deletes both tables; it is idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	c, err := f.conn(0)
	if err == nil {
		err = removeTables(c)
	}
	f.closed = true
	return errors.Join(err, f.ns.Close())
}

// RemoveStale deletes the tables a killed earlier run left behind (called at agent start, before
// NewForwarder), in the calling thread's network namespace. Absent tables are not an error.
func RemoveStale() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("flows: nftables: %w", err)
	}
	return removeTables(c)
}

func removeTables(c *nftables.Conn) error {
	var errs []error
	for _, fm := range bothFamilies() {
		// Adding the table first makes the delete succeed whether or not it existed.
		c.AddTable(fm.table())
		c.DelTable(fm.table())
		if err := c.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("flows: removing table %s %s: %w", fm.name, Table, err))
		}
	}
	return errors.Join(errs...)
}

// defaultSockBuf is the kernel's default socket buffer (net.core.wmem_default, rmem_default).
const defaultSockBuf = 212992

// batchSize estimates the bytes of a batch of n element changes and its acknowledgements.
func batchSize(n int) int { return 128 * n }

// forceBuffers raises the netlink socket's buffers so that a batch of batchBytes fits in one
// message to the kernel (netlink refuses a message larger than the send buffer) and its acks fit
// in the receive buffer. SO_*BUFFORCE needs CAP_NET_ADMIN, which nftables needs anyway.
func forceBuffers(batchBytes int) nftables.SockOption {
	return func(c *netlink.Conn) error {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		cerr := raw.Control(func(fd uintptr) {
			serr = errors.Join(
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, batchBytes),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, batchBytes))
		})
		if err := errors.Join(cerr, serr); err != nil {
			return fmt.Errorf("socket buffers for a %d-byte batch: %w", batchBytes, err)
		}
		return nil
	}
}
