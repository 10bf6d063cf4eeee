package wireguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
)

// gatewayState is what a gateway needs to serve again after a restart, without the management
// cluster and before members re-register: who the members are and where they last spoke from
// (members behind NAT are reachable at their mapped endpoint as long as their keepalives hold it).
type gatewayState struct {
	Members       []stateMember `json:"members"`
	QuiescedNodes []string      `json:"quiescedNodes,omitempty"`
}

type stateMember struct {
	Node      string `json:"node"`
	PublicKey string `json:"publicKey"`
	Endpoint  string `json:"endpoint,omitempty"`
}

type stateStore struct{ path string }

func (s *stateStore) load() (gatewayState, error) {
	var st gatewayState
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return gatewayState{}, fmt.Errorf("state file %s: %w", s.path, err)
	}
	return st, nil
}

func (s *stateStore) save(st gatewayState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(s.path, b)
}

// saveState writes the registered (non-static, non-draining) members and quiesced nodes.
func (g *Gateway) saveState() {
	peers, _ := g.tun.Peers()
	var st gatewayState
	g.pool.mu.Lock()
	for _, b := range g.pool.backends {
		if b.static || b.draining {
			continue
		}
		st.Members = append(st.Members, stateMember{Node: b.node, PublicKey: b.pub.String(), Endpoint: peers[b.pub].Endpoint})
	}
	for n := range g.pool.quiescedNodes {
		st.QuiescedNodes = append(st.QuiescedNodes, n)
	}
	g.pool.mu.Unlock()
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].PublicKey < st.Members[j].PublicKey })
	sort.Strings(st.QuiescedNodes)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.state.save(st); err != nil {
		g.log.Error(err, "save state", "stateFile", g.cfg.StateFile)
	}
}
