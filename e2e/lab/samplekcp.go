package lab

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"

	"github.com/caplb/caplb/config/samples"
)

// SampleKubeadmControlPlane reads the KubeadmControlPlane of a shipped sample
// (config/samples/<sample>): labs build their control-plane Machines' KubeadmConfigs from its
// kubeadmConfigSpec, as KubeadmControlPlane builds them, so that the sample a user copies is
// the one CABPK renders in a lab.
func SampleKubeadmControlPlane(sample string) (*controlplanev1.KubeadmControlPlane, error) {
	data, err := samples.FS.ReadFile(sample)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", sample, err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("sample %s has no KubeadmControlPlane", sample)
			}
			return nil, fmt.Errorf("sample %s: %w", sample, err)
		}
		if u.GetKind() != "KubeadmControlPlane" {
			continue
		}
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, kcp); err != nil {
			return nil, fmt.Errorf("sample %s: KubeadmControlPlane: %w", sample, err)
		}
		return kcp, nil
	}
}
