package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// nodeClient is what the Node API needs: list and watch the agent's own Node, patch it.
type nodeClient interface {
	list(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	patch(ctx context.Context, name string, body []byte) error
}

// restNodeClient talks to the core/v1 Nodes endpoint with a REST client whose scheme holds only
// core/v1. client-go's typed clientset would register every API group at start-up: about 20 MiB
// of the agent's resident memory for three calls.
type restNodeClient struct{ rc rest.Interface }

var _ nodeClient = restNodeClient{}

func newRESTNodeClient(cfg *rest.Config) (restNodeClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return restNodeClient{}, err
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
		return restNodeClient{}, fmt.Errorf("Node API client: %w", err)
	}
	return restNodeClient{rc: rc}, nil
}

func (c restNodeClient) list(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := c.rc.Get().Resource("nodes").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c restNodeClient) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource("nodes").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

func (c restNodeClient) patch(ctx context.Context, name string, body []byte) error {
	return c.rc.Patch(types.MergePatchType).Resource("nodes").Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: "caplb-agent"}, metav1.ParameterCodec).
		Body(body).Do(ctx).Error()
}
