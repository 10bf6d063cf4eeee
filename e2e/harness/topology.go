package harness

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/core/reconcilers/topology/cluster/patches"
	"sigs.k8s.io/cluster-api/exp/topology/scope"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TopologyObjects are what CAPI's topology controller would create for one Cluster of a
// ClusterClass, after the class's patches: the control plane (a KubeadmControlPlane, say) and,
// per topology MachineDeployment name, its bootstrap config template.
type TopologyObjects struct {
	ControlPlane       *unstructured.Unstructured
	BootstrapTemplates map[string]*unstructured.Unstructured
}

// RenderTopology runs CAPI's own ClusterClass patch engine (the one its topology controller
// runs: selectors, builtin variables, Go templates, JSON patches) for cluster, a Cluster whose
// spec.topology uses cc, and returns the patched control plane and bootstrap templates. templates
// are the class's templates (a manifest's objects, looked up by kind and name); an infrastructure
// template the list lacks (the provider's) stands in empty. c reads the control plane's CRD for
// its contract version. The names of the returned objects are <cluster>-control-plane and
// <cluster>-<md name>; CAPI generates others, the content is what counts.
func RenderTopology(ctx context.Context, c client.Client, cc *clusterv1.ClusterClass, templates []*unstructured.Unstructured, cluster *clusterv1.Cluster) (*TopologyObjects, error) {
	topo := cluster.Spec.Topology
	find := func(ref clusterv1.ClusterClassTemplateReference, stub bool) (*unstructured.Unstructured, error) {
		for _, t := range templates {
			if t.GetKind() == ref.Kind && t.GetName() == ref.Name {
				u := t.DeepCopy()
				u.SetNamespace(cluster.Namespace)
				return u, nil
			}
		}
		if !stub {
			return nil, fmt.Errorf("ClusterClass %s: no %s %s among the templates", cc.Name, ref.Kind, ref.Name)
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}}
		u.SetAPIVersion(ref.APIVersion)
		u.SetKind(ref.Kind)
		u.SetNamespace(cluster.Namespace)
		u.SetName(ref.Name)
		return u, nil
	}
	bp := &scope.ClusterBlueprint{Topology: topo, ClusterClass: cc, MachineDeployments: map[string]*scope.MachineDeploymentBlueprint{}}
	var err error
	if bp.InfrastructureClusterTemplate, err = find(cc.Spec.Infrastructure.TemplateRef, true); err != nil {
		return nil, err
	}
	bp.ControlPlane = &scope.ControlPlaneBlueprint{}
	if bp.ControlPlane.Template, err = find(cc.Spec.ControlPlane.TemplateRef, false); err != nil {
		return nil, err
	}
	if bp.ControlPlane.InfrastructureMachineTemplate, err = find(cc.Spec.ControlPlane.MachineInfrastructure.TemplateRef, true); err != nil {
		return nil, err
	}
	for _, mdc := range cc.Spec.Workers.MachineDeployments {
		b := &scope.MachineDeploymentBlueprint{}
		if b.BootstrapTemplate, err = find(mdc.Bootstrap.TemplateRef, false); err != nil {
			return nil, err
		}
		if b.InfrastructureMachineTemplate, err = find(mdc.Infrastructure.TemplateRef, true); err != nil {
			return nil, err
		}
		bp.MachineDeployments[mdc.Class] = b
	}

	// The desired state before patches, as CAPI's desired-state generator computes it: objects
	// from the templates, labelled with the topology's names.
	infraCluster := objectFromTemplate(bp.InfrastructureClusterTemplate, cluster.Name)
	cp := objectFromTemplate(bp.ControlPlane.Template, cluster.Name+"-control-plane")
	cpInfra := bp.ControlPlane.InfrastructureMachineTemplate.DeepCopy()
	if err := unstructured.SetNestedField(cp.Object, topo.Version, "spec", "version"); err != nil {
		return nil, err
	}
	if r := topo.ControlPlane.Replicas; r != nil {
		if err := unstructured.SetNestedField(cp.Object, int64(*r), "spec", "replicas"); err != nil {
			return nil, err
		}
	}
	infraGV, err := schema.ParseGroupVersion(cpInfra.GetAPIVersion())
	if err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedMap(cp.Object, map[string]any{"apiGroup": infraGV.Group, "kind": cpInfra.GetKind(), "name": cpInfra.GetName()},
		"spec", "machineTemplate", "spec", "infrastructureRef"); err != nil {
		return nil, err
	}
	desired := &scope.ClusterState{
		Cluster:               cluster,
		InfrastructureCluster: infraCluster,
		ControlPlane:          &scope.ControlPlaneState{Object: cp, InfrastructureMachineTemplate: cpInfra},
		MachineDeployments:    scope.MachineDeploymentsStateMap{},
	}
	for _, mdt := range topo.Workers.MachineDeployments {
		b, ok := bp.MachineDeployments[mdt.Class]
		if !ok {
			return nil, fmt.Errorf("Cluster %s: MachineDeployment %s names class %q, which ClusterClass %s lacks", cluster.Name, mdt.Name, mdt.Class, cc.Name)
		}
		labels := map[string]string{
			clusterv1.ClusterNameLabel:                          cluster.Name,
			clusterv1.ClusterTopologyOwnedLabel:                 "",
			clusterv1.ClusterTopologyMachineDeploymentNameLabel: mdt.Name,
		}
		md := &clusterv1.MachineDeployment{}
		md.Namespace, md.Name, md.Labels = cluster.Namespace, cluster.Name+"-"+mdt.Name, labels
		md.Spec.ClusterName, md.Spec.Replicas = cluster.Name, mdt.Replicas
		md.Spec.Template.Labels = labels
		md.Spec.Template.Spec.ClusterName, md.Spec.Template.Spec.Version = cluster.Name, topo.Version
		bt := b.BootstrapTemplate.DeepCopy()
		bt.SetName(md.Name)
		bt.SetLabels(map[string]string{clusterv1.ClusterTopologyMachineDeploymentNameLabel: mdt.Name})
		desired.MachineDeployments[mdt.Name] = &scope.MachineDeploymentState{
			Object: md, BootstrapTemplate: bt, InfrastructureMachineTemplate: b.InfrastructureMachineTemplate.DeepCopy(),
		}
	}
	if err := patches.NewEngine(c, nil).Apply(ctx, bp, desired); err != nil {
		return nil, fmt.Errorf("CAPI's patch engine: %w", err)
	}
	out := &TopologyObjects{ControlPlane: desired.ControlPlane.Object, BootstrapTemplates: map[string]*unstructured.Unstructured{}}
	for name, md := range desired.MachineDeployments {
		out.BootstrapTemplates[name] = md.BootstrapTemplate
	}
	return out, nil
}

// objectFromTemplate is the object a template stamps out: its spec.template.spec as spec, the kind
// without "Template".
func objectFromTemplate(t *unstructured.Unstructured, name string) *unstructured.Unstructured {
	spec, _, _ := unstructured.NestedMap(t.Object, "spec", "template", "spec")
	if spec == nil {
		spec = map[string]any{}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(t.GetAPIVersion())
	u.SetKind(trimTemplate(t.GetKind()))
	u.SetNamespace(t.GetNamespace())
	u.SetName(name)
	return u
}

func trimTemplate(kind string) string {
	const suffix = "Template"
	if len(kind) > len(suffix) && kind[len(kind)-len(suffix):] == suffix {
		return kind[:len(kind)-len(suffix)]
	}
	return kind
}
