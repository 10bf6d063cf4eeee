package wireguard

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// ManagementAPI is what a gateway run from its Secret reads and writes in the management
// cluster: the gateways' Secret, and its own report ConfigMap. Owned here so that the agent
// binary links a core/v1 REST client, not client-go's whole typed clientset (tens of MiB of
// resident memory on every node).
type ManagementAPI interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error
	UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error
}

// restManagementAPI implements ManagementAPI with a REST client that knows core/v1 only.
type restManagementAPI struct{ rc *rest.RESTClient }

var _ ManagementAPI = restManagementAPI{}

// NewManagementAPI returns a ManagementAPI for cfg.
func NewManagementAPI(cfg *rest.Config) (ManagementAPI, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("management cluster client: %w", err)
	}
	return restManagementAPI{rc: rc}, nil
}

func (a restManagementAPI) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, a.rc.Get().Namespace(namespace).Resource("secrets").Name(name).Do(ctx).Into(out)
}

func (a restManagementAPI) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	return out, a.rc.Get().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Into(out)
}

func (a restManagementAPI) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return a.rc.Post().Namespace(cm.Namespace).Resource("configmaps").Body(cm).Do(ctx).Error()
}

func (a restManagementAPI) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return a.rc.Put().Namespace(cm.Namespace).Resource("configmaps").Name(cm.Name).Body(cm).Do(ctx).Error()
}
