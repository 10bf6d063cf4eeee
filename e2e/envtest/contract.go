package envtest

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// providerContractLabels are the labels the kubeadm bootstrap and control-plane providers'
// kustomizations (config/crd/kustomization.yaml) put on their CRDs, which the CRD bases in the
// module lack: CAPI's controllers find a provider object's API version by them (a Machine whose
// bootstrap.configRef names a KubeadmConfig is refused without: "contract version label(s) are
// either missing or empty"). clusterctl installs the labelled CRDs; so does Start.
var providerContractLabels = map[string]string{
	"cluster.x-k8s.io/v1beta1": "v1beta1",
	"cluster.x-k8s.io/v1beta2": "v1beta2",
}

// providerGroups are the groups of the CAPI providers whose CRDs CAPICRDPaths installs beside
// core's.
var providerGroups = map[string]bool{"bootstrap.cluster.x-k8s.io": true, "controlplane.cluster.x-k8s.io": true}

// labelProviderCRDs puts providerContractLabels on the installed CRDs of providerGroups.
func labelProviderCRDs(ctx context.Context, cfg *rest.Config) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("labelling CAPI provider CRDs: %w", err)
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return fmt.Errorf("labelling CAPI provider CRDs: %w", err)
	}
	labelled := 0
	for i := range crds.Items {
		crd := &crds.Items[i]
		if !providerGroups[crd.Spec.Group] {
			continue
		}
		patch := client.MergeFrom(crd.DeepCopy())
		labels := crd.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		for k, v := range providerContractLabels {
			labels[k] = v
		}
		crd.SetLabels(labels)
		if err := c.Patch(ctx, crd, patch); err != nil {
			return fmt.Errorf("labelling CRD %s with its contract versions: %w", crd.Name, err)
		}
		labelled++
	}
	if labelled == 0 {
		return fmt.Errorf("labelling CAPI provider CRDs: none of groups %v is installed", providerGroups)
	}
	return nil
}
