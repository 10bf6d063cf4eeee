package lifecycle

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// decisionMessages are the agent log lines that explain who held the VIP and why: a claim or a
// release with its reason, a holder treated as failed, the health check's verdicts, memberlist
// declaring a member dead. A failed run prints them for every agent in time order, so that a
// spurious claim can be explained from CI's output alone (the logs' tails start after it).
var decisionMessages = []string{
	"became owner", "released the VIPs", "holder silent", "health check", "member down",
	"exit requested", "quiesce request", "data plane sync failed",
}

// DecisionLog is every agent's decision lines (decisionMessages), merged in time order, one per
// line: "<time> <node> <message> <key=value...>".
func (l *Lab) DecisionLog() string {
	matches, _ := filepath.Glob(filepath.Join(l.net.Dir(), "*-agent.log"))
	var lines []string
	for _, m := range matches {
		node := strings.TrimSuffix(filepath.Base(m), "-agent.log")
		lines = append(lines, decisionLines(m, node)...)
	}
	slices.Sort(lines) // each starts with an RFC 3339 time in UTC
	return strings.Join(lines, "\n")
}

// decisionLines reads one agent's JSON log at path and returns its decision lines.
func decisionLines(path, node string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		msg, _ := rec["msg"].(string)
		if !slices.ContainsFunc(decisionMessages, func(d string) bool { return strings.Contains(msg, d) }) {
			continue
		}
		ts, _ := rec["ts"].(string)
		var kv []string
		for k, v := range rec {
			switch k {
			case "ts", "msg", "level", "logger", "vips":
				continue
			}
			kv = append(kv, fmt.Sprintf("%s=%v", k, v))
		}
		slices.Sort(kv)
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s", ts, node, msg, strings.Join(kv, " "))))
	}
	return out
}
