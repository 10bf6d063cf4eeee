package cloudinit

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// jinjaHeader is the first line of CABPK's data: cloud-init renders the document as a jinja
// template with the instance's datasource before reading it.
const jinjaHeader = "## template: jinja"

// MetaData is what the lab's datasource offers a template as ds.meta_data (e.g.
// "local_hostname", "local_ipv4"), as a cloud's metadata service does: machine templates name
// the node and its advertise address with it, since both are unknown when CABPK renders.
type MetaData map[string]string

var (
	metaRef = regexp.MustCompile(`\{\{-?\s*ds\.meta_data\.([A-Za-z0-9_]+)\s*-?\}\}`)
	// anyTemplate is whatever jinja syntax is left once the metadata references are rendered.
	anyTemplate = regexp.MustCompile(`\{\{|\{%|\{#`)
)

// Render renders data as cloud-init does before parsing it: a document that starts with the
// jinja header has each {{ ds.meta_data.<key> }} replaced by meta's value. A key meta lacks, or
// any other template syntax, is refused (the lab's datasource renders nothing else, and a
// silently unrendered template would boot a machine with a literal "{{" in its configuration).
// Data without the header is returned as it is: cloud-init does not render it.
func Render(data []byte, meta MetaData) ([]byte, error) {
	body := string(data)
	first, rest, _ := strings.Cut(body, "\n")
	if strings.TrimSpace(first) != jinjaHeader {
		return data, nil
	}
	var missing []string
	rendered := metaRef.ReplaceAllStringFunc(rest, func(ref string) string {
		key := metaRef.FindStringSubmatch(ref)[1]
		v, ok := meta[key]
		if !ok {
			missing = append(missing, key)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("cloudinit: the template names ds.meta_data.%s, which the lab's datasource does not have (it has %s)",
			strings.Join(missing, ", ds.meta_data."), strings.Join(keys(meta), ", "))
	}
	if loc := anyTemplate.FindStringIndex(rendered); loc != nil {
		line := strings.Count(rendered[:loc[0]], "\n") + 2
		return nil, fmt.Errorf("cloudinit: line %d: template syntax other than {{ ds.meta_data.<key> }}, which the lab's datasource does not render", line)
	}
	return []byte(first + "\n" + rendered), nil
}

func keys(m MetaData) []string {
	if len(m) == 0 {
		return []string{"nothing"}
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
