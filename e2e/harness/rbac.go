package harness

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/caplb/caplb/config/rbac"
)

// ShippedServiceAccount is the manager's ServiceAccount as config/rbac binds it.
const ShippedServiceAccount = rbac.Namespace + "/" + rbac.ServiceAccount

// ApplyShippedRBAC creates the RBAC caplb ships (config/rbac, and the node-targets component's
// role) on the test API server, with its namespace. Objects that exist already are left alone.
func (e *Env) ApplyShippedRBAC(ctx context.Context) error {
	if _, err := e.Apply(ctx, "", []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+rbac.Namespace+"}\n")); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return fs.WalkDir(rbac.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || path == "kustomization.yaml" {
			return err
		}
		data, err := fs.ReadFile(rbac.FS, path)
		if err != nil {
			return err
		}
		objs, err := Decode(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, o := range objs {
			if o.GetKind() == "Kustomization" || o.GetKind() == "Component" {
				continue
			}
			if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("config/rbac/%s: creating %s %s: %w", path, o.GetKind(), o.GetName(), err)
			}
		}
		return nil
	})
}

// ImpersonateServiceAccount returns a copy of cfg that acts as the ServiceAccount
// "namespace/name", with the groups the API server gives a ServiceAccount token.
func ImpersonateServiceAccount(cfg *rest.Config, sa string) *rest.Config {
	ns, name, _ := strings.Cut(sa, "/")
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return c
}
