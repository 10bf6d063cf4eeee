package agent

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"

	"github.com/caplb/caplb/modes/election"
)

// electionConfig builds the memberlist side of cfg: the roster it starts
// from (r: the newest membership known at start), the keyring and label.
func electionConfig(cfg *agentv1.AgentConfiguration, r election.Roster) (election.Config, error) {
	e := cfg.Election
	ec := election.Config{
		Self:           cfg.NodeName,
		BindAddress:    e.BindAddress,
		Port:           e.Port,
		ProbeInterval:  e.ProbeInterval.Duration,
		ProbeTimeout:   e.ProbeTimeout.Duration,
		SuspicionMult:  e.SuspicionMult,
		GossipInterval: e.GossipInterval.Duration,
		RejoinInterval: e.RejoinInterval.Duration,
		Label:          e.Label,
		Dynamic:        cfg.Membership.Dynamic,
		Version:        r.Version,
		Members:        r.Members,
	}
	if cfg.Membership.Dynamic {
		ec.Digest = func(r election.Roster) string { return digestFor(cfg, r) }
	}
	if cfg.Membership.Dynamic && !r.Has(cfg.NodeName) {
		addr, err := ownAddress(cfg)
		if err != nil {
			return ec, err
		}
		ec.Address = addr
	}
	keys, err := readKeys(e)
	if err != nil {
		return ec, err
	}
	ec.Keys = keys
	return ec, nil
}

// ownAddress is the address this node gossips from when it is not (yet) a
// member: election.bindAddress, else the source address of the route to
// the first VIP (the node's own address on the VIP segment), in BGP mode to
// the first peer.
func ownAddress(cfg *agentv1.AgentConfiguration) (netip.Addr, error) {
	if cfg.Election.BindAddress != "" {
		return netip.MustParseAddr(cfg.Election.BindAddress).Unmap(), nil
	}
	target := cfg.ParsedVIPs()[0].String()
	if cfg.Mode == agentv1.ModeBGP && cfg.BGP != nil && len(cfg.BGP.Peers) > 0 {
		// In BGP mode the VIP is (or, after a crash, may still be) local: the route to the
		// first router names this node's address instead.
		target = cfg.BGP.Peers[0].Address
	}
	// A UDP "connection" sends nothing; it only asks the kernel for a route.
	c, err := net.Dial("udp", net.JoinHostPort(target, strconv.Itoa(cfg.Port)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("election.bindAddress: not a member yet and no route to %s to find this node's address (%w); set election.bindAddress", target, err)
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("election.bindAddress: %w", err)
	}
	return ap.Addr().Unmap(), nil
}

// readKeys returns the keyring: election.secretKeyFile first (the key that
// sends), then election.secondaryKeyFiles (accepted on receive).
func readKeys(e agentv1.ElectionConfig) ([][]byte, error) {
	if e.SecretKeyFile == "" {
		return nil, nil
	}
	var keys [][]byte
	k, err := readKey("election.secretKeyFile", e.SecretKeyFile)
	if err != nil {
		return nil, err
	}
	keys = append(keys, k)
	for i, p := range e.SecondaryKeyFiles {
		k, err := readKey(fmt.Sprintf("election.secondaryKeyFiles[%d]", i), p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// readKey accepts a raw or base64 key of 16, 24 or 32 bytes, in a file that
// only its owner may read.
func readKey(field, path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: %s is readable or writable by group or others (mode %v); chmod 600 it", field, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	s := strings.TrimSpace(string(b))
	if d, err := base64.StdEncoding.DecodeString(s); err == nil && validKeyLen(len(d)) {
		return d, nil
	}
	if validKeyLen(len(s)) {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("%s: %s: want 16, 24 or 32 bytes (raw or base64)", field, path)
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
