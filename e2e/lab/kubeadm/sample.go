//go:build linux

package kubeadm

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/caplb/caplb/config/samples"
)

// SampleAPIServerArgs reads the API server flags of the shipped sample's KubeadmControlPlane
// (config/samples/<sample>: kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs), for
// Cluster.APIServerArgs: a lab's kubeadm runs with exactly what the sample asks for.
func SampleAPIServerArgs(sample string) ([]Arg, error) {
	data, err := samples.FS.ReadFile(sample)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", sample, err)
	}
	var out []Arg
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() != "KubeadmControlPlane" {
			continue
		}
		list, _, _ := unstructured.NestedSlice(u.Object, "spec", "kubeadmConfigSpec", "clusterConfiguration", "apiServer", "extraArgs")
		for i, item := range list {
			m, _ := item.(map[string]any)
			name, _, _ := unstructured.NestedString(m, "name")
			value, _, _ := unstructured.NestedString(m, "value")
			if name == "" {
				return nil, fmt.Errorf("sample %s: apiServer.extraArgs[%d] has no name", sample, i)
			}
			out = append(out, Arg{Name: name, Value: value})
		}
	}
	return out, nil
}
