package endpointmove

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
)

// RewriteKubeadmConfig sets kube-system/kubeadm-config's ClusterConfiguration
// controlPlaneEndpoint to E2 and keeps E1's host in apiServer.certSANs. A control-plane Machine
// joining after the move reads this document for its serving certificate (kubeadm adds the
// controlPlaneEndpoint host by itself, certSANs are the rest) and for its admin.conf: without
// E1 in certSANs its certificate would not verify for clients still on E1.
//
// The document is edited as a YAML tree, not decoded into kubeadm's types, so that fields of a
// newer kubeadm API than this build knows survive, in their order. When it changes it is
// re-encoded (indentation may differ from kubeadm's; the content does not).
func (m Move) RewriteKubeadmConfig(cm *corev1.ConfigMap) (bool, error) {
	where := fmt.Sprintf("ConfigMap %s/%s key %q", cm.Namespace, cm.Name, ClusterConfigurationKey)
	text, ok := cm.Data[ClusterConfigurationKey]
	if !ok {
		return false, fmt.Errorf("ConfigMap %s/%s has no %q key", cm.Namespace, cm.Name, ClusterConfigurationKey)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return false, fmt.Errorf("%s: parsing: %w", where, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return false, fmt.Errorf("%s: not a mapping", where)
	}
	root := doc.Content[0]
	changed := false

	cpe := mapValue(root, "controlPlaneEndpoint")
	switch {
	case cpe == nil || cpe.Kind != yaml.ScalarNode:
		return false, fmt.Errorf("%s: no controlPlaneEndpoint (kubeadm writes it when the cluster has one): %w", where, ErrForeignEndpoint)
	case m.classifyHostPort(cpe.Value) == atOld:
		cpe.Value, cpe.Style = m.newHostPort(), 0
		changed = true
	case m.classifyHostPort(cpe.Value) == foreign:
		return false, fmt.Errorf("%s: controlPlaneEndpoint %q %w", where, cpe.Value, ErrForeignEndpoint)
	}

	if addCertSAN(root, m.Old.Host) {
		changed = true
	}
	if !changed {
		return false, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	if err := enc.Close(); err != nil {
		return false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	cm.Data[ClusterConfigurationKey] = buf.String()
	return true, nil
}

// addCertSAN appends host to apiServer.certSANs (creating both when absent) unless it is there.
func addCertSAN(root *yaml.Node, host string) bool {
	apiServer := mapValue(root, "apiServer")
	if apiServer == nil || apiServer.Kind != yaml.MappingNode {
		if apiServer != nil {
			// "apiServer: null" or {}: replace the value in place.
			*apiServer = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		} else {
			apiServer = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			root.Content = append(root.Content, scalar("apiServer"), apiServer)
		}
	}
	sans := mapValue(apiServer, "certSANs")
	if sans == nil || sans.Kind != yaml.SequenceNode {
		if sans != nil {
			*sans = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		} else {
			sans = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			apiServer.Content = append([]*yaml.Node{scalar("certSANs"), sans}, apiServer.Content...)
		}
	}
	for _, s := range sans.Content {
		if sameHost(s.Value, host) {
			return false
		}
	}
	sans.Content = append(sans.Content, scalar(host))
	// Block style, whatever a flow-style empty "{}" or "[]" was.
	apiServer.Style &^= yaml.FlowStyle
	sans.Style &^= yaml.FlowStyle
	return true
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
