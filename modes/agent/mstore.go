package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	"github.com/caplb/caplb/modes/election"
)

// memberStore keeps the newest membership this node knows. Sources, oldest
// to newest as they usually arrive: the configuration file, the state file
// (what an earlier run learned), the node's own Node annotation, and the
// peers' gossip. Whatever the source, the highest version wins and versions
// never go back; a new version is written to the state file (0600, atomic
// rename) before the node runs it, so a restart cannot resurrect an older
// one.
type memberStore struct {
	path string
	log  logr.Logger

	mu  sync.Mutex
	cur agentv1.Membership
	// run is called (under mu, after persisting) with each newer roster:
	// the election's SetRoster.
	run func(election.Roster)
	// seenMod, seenSize: the state file as reload last saw it.
	seenMod  time.Time
	seenSize int64
}

// newMemberStore starts from the configuration and the state file.
func newMemberStore(cfg *agentv1.AgentConfiguration, log logr.Logger) (*memberStore, error) {
	s := &memberStore{path: cfg.Membership.StateFile, log: log}
	s.cur = agentv1.Membership{Version: cfg.Membership.Version, Members: append([]agentv1.MemberConfig{}, cfg.Members...)}
	if !cfg.Membership.Dynamic || s.path == "" {
		return s, nil
	}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("membership.stateFile: %w", err)
	}
	var d agentv1.Membership
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("membership.stateFile: %s: %w; remove it to start from the configuration", s.path, err)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("membership.stateFile: %s: %w; remove it to start from the configuration", s.path, err)
	}
	if d.Version > s.cur.Version {
		log.Info("membership from the state file is newer than the configuration's", "version", d.Version, "configVersion", s.cur.Version)
		s.cur = d
	}
	return s, nil
}

// current returns the newest membership known.
func (s *memberStore) current() agentv1.Membership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *memberStore) roster() election.Roster {
	r, _ := election.RosterFrom(s.current())
	return r
}

// offer considers d from source; it reports whether d became current.
func (s *memberStore) offer(d agentv1.Membership, source string) bool {
	if err := d.Validate(); err != nil {
		s.log.Info("ignoring an invalid membership", "source", source, "error", err.Error())
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Version < s.cur.Version {
		return false
	}
	if d.Version == s.cur.Version {
		if !reflect.DeepEqual(normalise(d), normalise(s.cur)) {
			s.log.Info("two different memberships carry the same version; keeping the one already running (the manager must never issue this)",
				"source", source, "version", d.Version)
		}
		return false
	}
	if err := s.persist(d); err != nil {
		// Never run a version that a restart could forget.
		s.log.Error(err, "cannot keep the new membership; not running it", "source", source, "version", d.Version)
		return false
	}
	s.log.Info("new membership", "source", source, "version", d.Version, "previous", s.cur.Version, "members", len(d.Members))
	s.cur = d
	if s.run != nil {
		if r, err := election.RosterFrom(d); err == nil {
			s.run(r)
		}
	}
	return true
}

func normalise(d agentv1.Membership) agentv1.Membership {
	if d.Members == nil {
		d.Members = []agentv1.MemberConfig{}
	}
	return d
}

// persist writes d to the state file: a temporary file in the same
// directory, synced, then renamed over the old one.
func (s *memberStore) persist(d agentv1.Membership) error {
	if s.path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	b, err := json.Marshal(normalise(d))
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(s.path), ".membership-*")
	if err != nil {
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("membership.stateFile: %w", err)
	}
	return nil
}

// reload offers the state file's membership if it changed since the last
// look: an operator (or a test) may drop a newer version there, and SIGHUP
// asks for it at once. The agent's own writes read back as the same
// version and change nothing.
func (s *memberStore) reload() {
	if s.path == "" {
		return
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return
	}
	s.mu.Lock()
	same := fi.ModTime().Equal(s.seenMod) && fi.Size() == s.seenSize
	s.seenMod, s.seenSize = fi.ModTime(), fi.Size()
	s.mu.Unlock()
	if same {
		return
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return
	}
	var d agentv1.Membership
	if err := json.Unmarshal(b, &d); err != nil {
		s.log.Info("ignoring membership.stateFile that does not parse", "error", err.Error())
		return
	}
	s.offer(d, "state file")
}
