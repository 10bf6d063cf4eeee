package harness

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		manifest string
		kinds    []string
		wantErr  string
	}{
		{
			name: "documents in order, empty ones skipped",
			manifest: `# a comment
---
apiVersion: v1
kind: Namespace
metadata: {name: a}
---
---
apiVersion: loadbalancer.cluster.x-k8s.io/v1alpha1
kind: LoadBalancer
metadata: {name: lb}
spec: {endpoint: {port: 6443}}
`,
			kinds: []string{"Namespace", "LoadBalancer"},
		},
		{name: "no kind", manifest: "apiVersion: v1\nmetadata: {name: a}\n", wantErr: "document 1"},
		{name: "not YAML", manifest: "kind: [", wantErr: "decoding manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := Decode([]byte(tc.manifest))
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			g.Expect(kinds).To(Equal(tc.kinds))
		})
	}
}

// Integers stay int64, as the API machinery's unstructured helpers expect (a plain JSON decode
// would make them float64 and NestedInt64 would not find them).
func TestDecodeKeepsIntegers(t *testing.T) {
	g := NewWithT(t)
	objs, err := Decode([]byte("apiVersion: v1\nkind: X\nspec: {port: 6443}\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs[0].Object["spec"]).To(HaveKeyWithValue("port", int64(6443)))
}
