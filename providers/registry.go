package providers

import (
	"fmt"
	"sort"
)

// Registry maps backend kinds to implementations. It is built once at start-up and read-only
// afterwards, so it needs no lock.
type Registry struct {
	backends map[string]Backend
}

// NewRegistry returns a registry holding the given backends.
func NewRegistry(backends ...Backend) (*Registry, error) {
	r := &Registry{backends: map[string]Backend{}}
	for _, b := range backends {
		if _, dup := r.backends[b.Kind()]; dup {
			return nil, fmt.Errorf("backend %q registered twice", b.Kind())
		}
		r.backends[b.Kind()] = b
	}
	return r, nil
}

// Get returns the backend for kind, or an error that lists the kinds this build supports.
func (r *Registry) Get(kind string) (Backend, error) {
	if b, ok := r.backends[kind]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("spec.backend: no backend %q in this build; supported: %v", kind, r.Kinds())
}

// Kinds lists the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	kinds := make([]string, 0, len(r.backends))
	for k := range r.backends {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}
