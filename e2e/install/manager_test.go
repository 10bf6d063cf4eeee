package install

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/caplb/caplb/e2e/envtest"
	"github.com/caplb/caplb/hack/release"
)

// buildManager builds the real caplb binary, as the image ships it.
func buildManager(t *testing.T) string {
	t.Helper()
	root, err := envtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "caplb")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/caplb")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/caplb: %v\n%s", err, out)
	}
	return bin
}

// managerDeployment finds the released Deployment and its container named "manager".
func managerDeployment(t *testing.T, objs []unstructured.Unstructured) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
			t.Fatalf("decoding Deployment %s: %v", o.GetName(), err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == release.ManagerContainer {
				return d, c
			}
		}
	}
	t.Fatalf("the components have no Deployment with a container named %q", release.ManagerContainer)
	return nil, corev1.Container{}
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerArgs returns the container's command line as the kubelet would run it: $(VAR)
// references expanded from the container's env (values and the downward API's
// metadata.namespace), unknown references left as they are, like the kubelet does.
func containerArgs(t *testing.T, d *appsv1.Deployment, c corev1.Container) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = d.Namespace
		default:
			t.Fatalf("manager env %s: the install test cannot emulate %+v", e.Name, e.ValueFrom)
		}
	}
	args := append(append([]string{}, c.Command...), c.Args...)
	for i, a := range args {
		args[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	return args
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates with a bound token of the
// ServiceAccount, which the API server issues through the TokenRequest API exactly as for the
// kubelet's projected token in the manager's pod: the manager is the ServiceAccount, no more.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, admin *rest.Config, ns, sa string) (string, *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", ns, sa, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["management"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "management", AuthInfo: sa}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(rest.AnonymousClientConfig(admin))
	cfg.BearerToken = tr.Status.Token
	return path, cfg
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// managerProcess is the caplb binary running the released container's command line.
type managerProcess struct {
	cmd                    *exec.Cmd
	logPath                string
	probeAddr, metricsAddr string
	done                   chan error
	// metricsToken, when set, is the bearer token metrics sends over HTTPS (the secure
	// --diagnostics-address); empty means the manager runs with --insecure-diagnostics (plain HTTP).
	metricsToken string
}

// startManager runs bin with args (the container's, after its image entrypoint) plus the
// kubeconfig the pod would get from its ServiceAccount, and loopback listeners so that parallel
// test binaries do not collide on :8443/:8081 (later flags win).
func startManager(t *testing.T, bin string, args []string, kubeconfigPath string) *managerProcess {
	t.Helper()
	p := &managerProcess{logPath: filepath.Join(t.TempDir(), "manager.log"), probeAddr: freeAddr(t),
		metricsAddr: freeAddr(t), done: make(chan error, 1)}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubeconfig="+kubeconfigPath,
		"--diagnostics-address="+p.metricsAddr, "--health-probe-bind-address="+p.probeAddr)
	p.cmd = exec.Command(bin, args...)
	// Only what a pod has: no KUBECONFIG or other credentials from the test's environment.
	p.cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(45 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("manager log (%s):\n%s", strings.Join(args, " "), p.log())
		}
	})
	return p
}

func (p *managerProcess) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// ready reports whether /readyz answers 200 (informers synced, which needs list+watch on every
// watched type) and fails if the process has exited.
func (p *managerProcess) ready(ctx context.Context) (bool, string, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return false, "", fmt.Errorf("manager exited: %v\n%s", err, p.log())
	default:
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.probeAddr+"/readyz", nil)
	if err != nil {
		return false, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error(), nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status, nil
}

// forbidden returns the manager's log lines that report an RBAC denial.
func (p *managerProcess) forbidden() []string {
	var out []string
	for _, l := range strings.Split(p.log(), "\n") {
		if strings.Contains(l, "forbidden") || strings.Contains(l, "Forbidden") {
			out = append(out, l)
		}
	}
	return out
}

// metrics fetches the manager's Prometheus exposition and returns the lines of the series whose
// name starts with prefix.
func (p *managerProcess) metrics(ctx context.Context, prefix string) ([]string, error) {
	code, body, err := scrape(ctx, p.metricsAddr, p.metricsToken != "", p.metricsToken)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d: %s", code, body)
	}
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out, nil
}
