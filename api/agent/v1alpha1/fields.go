package v1alpha1

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

var durationType = reflect.TypeOf(Duration{})

// checkDurations walks the decoded document along AgentConfiguration's
// type and reports every duration field that is not a Go duration string,
// naming the field ("quiesce.drain: 200 is not a duration; ..."): the JSON
// decoder's own error for a custom type names no field.
func checkDurations(data []byte) []error {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil // the strict decode reports it
	}
	var errs []error
	walkDurations(reflect.TypeOf(AgentConfiguration{}), doc, "", &errs)
	return errs
}

func walkDurations(t reflect.Type, v any, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		s, ok := v.(string)
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s: %v is not a duration; write it with a unit, e.g. \"200ms\" or \"0s\"", path, v))
			return
		}
		if _, err := time.ParseDuration(s); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %q is not a duration; write it with a unit, e.g. \"200ms\" or \"0s\"", path, s))
		}
	case t.Kind() == reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if f.Anonymous || name == "" || name == "-" {
				continue
			}
			if sub, ok := m[name]; ok {
				walkDurations(f.Type, sub, join(path, name), errs)
			}
		}
	case t.Kind() == reflect.Slice:
		items, ok := v.([]any)
		if !ok {
			return
		}
		for i, it := range items {
			walkDurations(t.Elem(), it, fmt.Sprintf("%s[%d]", path, i), errs)
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// explicitZeros are fields where 0 means something (no repeated
// announcements, no drain) and so may be written as 0 in the file, where a
// missing field takes the default. Parse keeps an explicit 0 that Default
// would have replaced.
var explicitZeros = []struct {
	path  []string
	apply func(*AgentConfiguration)
}{
	{[]string{"arp", "burstCount"}, func(c *AgentConfiguration) { c.ARP.BurstCount = 0 }},
	{[]string{"quiesce", "drain"}, func(c *AgentConfiguration) { c.Quiesce.Drain.Duration = 0 }},
}

// keepExplicitZeros re-applies the zeros written in data after Default.
func keepExplicitZeros(data []byte, c *AgentConfiguration) {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return
	}
	for _, z := range explicitZeros {
		var v any = doc
		for _, p := range z.path {
			m, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = m[p]
		}
		switch x := v.(type) {
		case float64:
			if x == 0 {
				z.apply(c)
			}
		case string:
			if d, err := time.ParseDuration(x); err == nil && d == 0 {
				z.apply(c)
			}
		}
	}
}
