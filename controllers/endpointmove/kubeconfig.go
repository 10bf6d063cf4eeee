package endpointmove

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// serverNode is one clusters[].cluster.server scalar of a kubeconfig.
type serverNode struct {
	cluster string
	node    *yaml.Node
	// tlsName is the entry's tls-server-name scalar (nil when absent).
	tlsName *yaml.Node
}

// kubeconfigServers returns the server scalars of a kubeconfig (YAML or JSON, which is YAML).
func kubeconfigServers(text string) ([]serverNode, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("parsing the kubeconfig: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the kubeconfig is not a mapping")
	}
	clusters := mapValue(doc.Content[0], "clusters")
	if clusters == nil || clusters.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("the kubeconfig has no clusters list")
	}
	var out []serverNode
	for _, item := range clusters.Content {
		name := ""
		if n := mapValue(item, "name"); n != nil {
			name = n.Value
		}
		c := mapValue(item, "cluster")
		if s := mapValue(c, "server"); s != nil && s.Kind == yaml.ScalarNode {
			sn := serverNode{cluster: name, node: s}
			if t := mapValue(c, "tls-server-name"); t != nil && t.Kind == yaml.ScalarNode {
				sn.tlsName = t
			}
			out = append(out, sn)
		}
	}
	return out, nil
}

// mapValue returns the value of key in a mapping node, nil when absent or n is not a mapping.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// rewriteKubeconfig points every cluster entry whose server is E1 at E2. It edits the text in
// place, at the scalar's position, so that every other byte (the CA data, comments, the
// writer's formatting) stays as it was: the kube-proxy ConfigMap and the kubeconfig Secret are
// read by tools that do not care, but an object that is byte-for-byte the same but for the
// server is what the operator can diff. strict: every server must be E1 or E2 (cluster-info
// and kube-proxy have one cluster, the API server's); otherwise entries naming other servers
// are left alone. changed is false when no entry named E1 (already moved).
func (m Move) rewriteKubeconfig(text string, strict bool) (string, bool, error) {
	servers, err := kubeconfigServers(text)
	if err != nil {
		return "", false, err
	}
	var old []serverNode
	atNewCount := 0
	for _, s := range servers {
		switch m.classifyServer(s.node.Value) {
		case atOld:
			old = append(old, s)
		case atNew:
			atNewCount++
		default:
			if strict {
				return "", false, fmt.Errorf("cluster %q has server %q, which %w", s.cluster, s.node.Value, ErrForeignEndpoint)
			}
		}
	}
	if len(old) == 0 {
		if atNewCount == 0 {
			return "", false, fmt.Errorf("no cluster entry's server %w", ErrForeignEndpoint)
		}
		return text, false, nil
	}
	type edit struct {
		cluster string
		node    *yaml.Node
		repl    string
	}
	var edits []edit
	for _, s := range old {
		repl, err := m.newServer(s.node.Value)
		if err != nil {
			return "", false, err
		}
		edits = append(edits, edit{s.cluster, s.node, repl})
		// A tls-server-name of E1's host would make clients verify E2 as E1: it works only while
		// E2's certificates carry E1 too, and hides a missing SAN until E1 leaves them.
		if s.tlsName != nil && sameHost(s.tlsName.Value, m.Old.Host) {
			edits = append(edits, edit{s.cluster, s.tlsName, m.New.Host})
		}
	}
	lines := strings.Split(text, "\n")
	// Last first, so that an edit does not shift the position of the ones still to do (a JSON
	// kubeconfig may hold several on one line).
	slices.SortFunc(edits, func(a, b edit) int {
		if a.node.Line != b.node.Line {
			return b.node.Line - a.node.Line
		}
		return b.node.Column - a.node.Column
	})
	for _, e := range edits {
		if lines, err = replaceScalar(lines, e.node, e.repl); err != nil {
			return "", false, fmt.Errorf("cluster %q: %w", e.cluster, err)
		}
	}
	return strings.Join(lines, "\n"), true, nil
}

// replaceScalar replaces a plain or quoted scalar's text at its position with repl in the
// same style. URLs and host names need no escaping in either quote style.
func replaceScalar(lines []string, n *yaml.Node, repl string) ([]string, error) {
	quote := ""
	switch n.Style {
	case 0:
	case yaml.DoubleQuotedStyle:
		quote = `"`
	case yaml.SingleQuotedStyle:
		quote = `'`
	default:
		return nil, fmt.Errorf("server is written in an unexpected YAML style (%v)", n.Style)
	}
	if n.Line < 1 || n.Line > len(lines) {
		return nil, fmt.Errorf("server's position (line %d) is outside the text", n.Line)
	}
	line := []rune(lines[n.Line-1])
	col := n.Column - 1
	token := []rune(quote + n.Value + quote)
	if col < 0 || col+len(token) > len(line) || string(line[col:col+len(token)]) != string(token) {
		return nil, fmt.Errorf("server %q is not written verbatim at line %d, column %d (escaped?)", n.Value, n.Line, n.Column)
	}
	out := slices.Clone(lines)
	out[n.Line-1] = string(line[:col]) + quote + repl + quote + string(line[col+len(token):])
	return out, nil
}
