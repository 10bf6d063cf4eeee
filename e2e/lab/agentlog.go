package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// decisionMessages are the agent log lines that explain who held the VIP and why: a claim or a
// release with its reason, the data plane's own record of it, a holder treated as failed,
// fail-open, the health check's verdicts, memberlist declaring a member dead, quiesce and exit.
var decisionMessages = []string{
	"became owner", "released the VIPs", "VIP added", "VIP released", "treated as failed", "fail-open",
	"health check", "member down", "exit requested", "quiesce request", "data plane sync failed",
}

// IsAgentDecision reports whether an agent log message is one of decisionMessages.
func IsAgentDecision(msg string) bool {
	return slices.ContainsFunc(decisionMessages, func(d string) bool { return strings.Contains(msg, d) })
}

// AgentDecisions reads the agent's JSON log at path and returns its decision lines
// (IsAgentDecision) from since on, one per line: "<RFC 3339 time> <node> <message> <key=value...>",
// so that several agents' lines merge in time order by sorting them. A missing log has none.
func AgentDecisions(path, node string, since time.Time) []string {
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
		ts, _ := rec["ts"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(since) || !IsAgentDecision(msg) {
			continue
		}
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

// MergeAgentDecisions is AgentDecisions of every agent (node name to log path) from since on,
// in time order.
func MergeAgentDecisions(logs map[string]string, since time.Time) string {
	var lines []string
	for node, path := range logs {
		lines = append(lines, AgentDecisions(path, node, since)...)
	}
	slices.Sort(lines) // each starts with an RFC 3339 time in UTC
	return strings.Join(lines, "\n")
}
