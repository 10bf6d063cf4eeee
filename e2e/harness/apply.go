package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode splits a multi-document YAML manifest into objects, skipping empty documents.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding manifest: %w", err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		// The unstructured JSON scheme keeps integers int64, as the API machinery expects.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("manifest document %d: %w", len(out)+1, err)
		}
		out = append(out, u)
	}
}

// Apply creates every object of a manifest, in order; namespaced objects that name no
// namespace go to namespace.
func (e *Env) Apply(ctx context.Context, namespace string, manifest []byte) ([]*unstructured.Unstructured, error) {
	objs, err := Decode(manifest)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		namespaced, err := e.Client.IsObjectNamespaced(o)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if namespaced && o.GetNamespace() == "" {
			o.SetNamespace(namespace)
		}
		if err := e.Client.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return objs, nil
}
