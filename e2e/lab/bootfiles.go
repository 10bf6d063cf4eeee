package lab

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/config/samples"
)

// BootFile is one entry of a KubeadmControlPlane's kubeadmConfigSpec.files whose content comes
// from a Secret: what the bootstrap provider turns into a cloud-init write_files entry.
type BootFile struct {
	Path        string
	Owner       string
	Permissions os.FileMode
	SecretName  string
	SecretKey   string
}

// SampleBootFiles reads the files a user copies from the shipped KubeadmControlPlane sample
// (config/samples/<sample>): labs boot their machines with exactly these, so a sample that
// forgets a file, a key or a mode fails in a lab before it fails a user. It also returns the
// name of the sample's Cluster, whose bootstrap Secret the files name.
func SampleBootFiles(sample string) (cluster string, files []BootFile, err error) {
	data, err := samples.FS.ReadFile(sample)
	if err != nil {
		return "", nil, fmt.Errorf("sample %s: %w", sample, err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		switch u.GetKind() {
		case "Cluster":
			cluster = u.GetName()
		case "LoadBalancer":
			if cluster == "" {
				cluster, _, _ = unstructured.NestedString(u.Object, "spec", "clusterName")
			}
		case "KubeadmControlPlane":
			list, _, _ := unstructured.NestedSlice(u.Object, "spec", "kubeadmConfigSpec", "files")
			for i, item := range list {
				f, err := parseBootFile(item)
				if err != nil {
					return "", nil, fmt.Errorf("sample %s: kubeadmConfigSpec.files[%d]: %w", sample, i, err)
				}
				files = append(files, f)
			}
		}
	}
	if cluster == "" || len(files) == 0 {
		return "", nil, fmt.Errorf("sample %s: names no cluster, or has no KubeadmControlPlane files", sample)
	}
	return cluster, files, nil
}

// SampleObjects returns the shipped sample's LoadBalancer and Secrets (config/samples/<sample>),
// moved into namespace: labs run the LoadBalancer a user copies.
func SampleObjects(sample, namespace string) (*lbv1.LoadBalancer, []*corev1.Secret, error) {
	data, err := samples.FS.ReadFile(sample)
	if err != nil {
		return nil, nil, fmt.Errorf("sample %s: %w", sample, err)
	}
	var lb *lbv1.LoadBalancer
	var secrets []*corev1.Secret
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		switch u.GetKind() {
		case "LoadBalancer":
			lb = &lbv1.LoadBalancer{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, lb); err != nil {
				return nil, nil, fmt.Errorf("sample %s: LoadBalancer: %w", sample, err)
			}
			lb.Namespace = namespace
		case "Secret":
			s := &corev1.Secret{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
				return nil, nil, fmt.Errorf("sample %s: Secret: %w", sample, err)
			}
			s.Namespace = namespace
			secrets = append(secrets, s)
		}
	}
	if lb == nil {
		return nil, nil, fmt.Errorf("sample %s has no LoadBalancer", sample)
	}
	return lb, secrets, nil
}

// SampleWorkerBootFiles reads the files of the shipped sample's KubeadmConfigTemplate (the
// workers' bootstrap, config/samples/<sample>): labs boot worker machines with exactly these.
func SampleWorkerBootFiles(sample string) ([]BootFile, error) {
	data, err := samples.FS.ReadFile(sample)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", sample, err)
	}
	var files []BootFile
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() != "KubeadmConfigTemplate" {
			continue
		}
		list, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "files")
		for i, item := range list {
			f, err := parseBootFile(item)
			if err != nil {
				return nil, fmt.Errorf("sample %s: KubeadmConfigTemplate files[%d]: %w", sample, i, err)
			}
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("sample %s has no KubeadmConfigTemplate files", sample)
	}
	return files, nil
}

func parseBootFile(item any) (BootFile, error) {
	m, ok := item.(map[string]any)
	if !ok {
		return BootFile{}, fmt.Errorf("not an object")
	}
	f := BootFile{Permissions: 0o644, Owner: "root:root"}
	f.Path, _, _ = unstructured.NestedString(m, "path")
	if o, _, _ := unstructured.NestedString(m, "owner"); o != "" {
		f.Owner = o
	}
	if p, _, _ := unstructured.NestedString(m, "permissions"); p != "" {
		mode, err := strconv.ParseUint(p, 8, 32)
		if err != nil {
			return f, fmt.Errorf("permissions %q: %w", p, err)
		}
		f.Permissions = os.FileMode(mode)
	}
	f.SecretName, _, _ = unstructured.NestedString(m, "contentFrom", "secret", "name")
	f.SecretKey, _, _ = unstructured.NestedString(m, "contentFrom", "secret", "key")
	if f.Path == "" || f.SecretName == "" || f.SecretKey == "" {
		return f, fmt.Errorf("want path and contentFrom.secret{name,key}")
	}
	return f, nil
}

// WriteBootFiles writes files into a machine's root as cloud-init's write_files does: parent
// directories 0755, the file with its permissions, owned by root (the labs run as root). A key
// missing from the Secret fails the boot, as it fails the bootstrap provider.
func WriteBootFiles(root string, files []BootFile, secret *corev1.Secret) error {
	for _, f := range files {
		if f.SecretName != secret.Name {
			return fmt.Errorf("file %s: content from Secret %s, but the machine's bootstrap Secret is %s", f.Path, f.SecretName, secret.Name)
		}
		content, ok := secret.Data[f.SecretKey]
		if !ok {
			return fmt.Errorf("file %s: Secret %s has no key %s", f.Path, secret.Name, f.SecretKey)
		}
		if f.Owner != "root:root" && f.Owner != "root" {
			return fmt.Errorf("file %s: owner %s: the lab writes files as root only", f.Path, f.Owner)
		}
		if err := WriteMachineFile(filepath.Join(root, f.Path), content, f.Permissions); err != nil {
			return err
		}
	}
	return nil
}

// WriteMachineFile writes a file under a machine's root, creating its directories 0755.
func WriteMachineFile(path string, content []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, content, mode); err != nil {
		return err
	}
	return os.Chmod(path, mode) // umask-proof
}
