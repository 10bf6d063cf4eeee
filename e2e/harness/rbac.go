package harness

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

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

// ManagerTokenFileKubeconfig writes a token of the manager's ServiceAccount into dir and returns a
// kubeconfig for the test API server that reads it through tokenFile, as a kubeconfig could name
// the token a pod mounts (/var/run/secrets/kubernetes.io/serviceaccount/token): what a tenant
// could put in a <cluster>-kubeconfig Secret to borrow the manager's identity. The manager
// refuses such a kubeconfig (controllers/kubeconfig_guard.go).
func (e *Env) ManagerTokenFileKubeconfig(ctx context.Context, dir string) ([]byte, error) {
	token, err := e.managerToken(ctx)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
		return nil, err
	}
	return e.selfKubeconfig(&clientcmdapi.AuthInfo{TokenFile: path})
}

// ManagerInlineTokenKubeconfig returns a kubeconfig for the test API server carrying a token of
// the manager's ServiceAccount inline: the manager's identity in a tenant's hands by some other
// leak, which no check of the kubeconfig can tell from a tenant's own token.
func (e *Env) ManagerInlineTokenKubeconfig(ctx context.Context) ([]byte, error) {
	token, err := e.managerToken(ctx)
	if err != nil {
		return nil, err
	}
	return e.selfKubeconfig(&clientcmdapi.AuthInfo{Token: token})
}

func (e *Env) managerToken(ctx context.Context) (string, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(rbac.Namespace).CreateToken(ctx, rbac.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("issuing a token for %s: %w", ShippedServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// selfKubeconfig is a kubeconfig for the test API server itself with user as its credentials.
func (e *Env) selfKubeconfig(user *clientcmdapi.AuthInfo) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["mgmt"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	kc.AuthInfos["mgmt"] = user
	kc.Contexts["mgmt"] = &clientcmdapi.Context{Cluster: "mgmt", AuthInfo: "mgmt"}
	kc.CurrentContext = "mgmt"
	return clientcmd.Write(*kc)
}

// GrantRootPath lets every authenticated user GET the non-resource path "/" (some clusters
// allow it), under a name of its own so that parallel tests do not collide. The grant stays: the
// suite's API server is thrown away after the run.
func (e *Env) GrantRootPath(ctx context.Context, name string) error {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "root-path-" + name},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/"}, Verbs: []string{"get"}}}}
	if err := e.Client.Create(ctx, role); err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}}
	if err := e.Client.Create(ctx, b); err != nil {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", b.Name, err)
	}
	return nil
}
