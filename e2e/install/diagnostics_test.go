package install

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caplb/caplb/e2e/harness"
)

// metricsReaderRole is the ClusterRole the release ships for scrapers of the manager's /metrics.
const metricsReaderRole = "caplb-metrics-reader"

// scrape GETs /metrics at addr: over HTTPS (the manager's self-signed certificate, not verified:
// what is tested is authentication and authorization, not the certificate) with token as a bearer
// token when secure, plain HTTP otherwise.
func scrape(ctx context.Context, addr string, secure bool, token string) (int, string, error) {
	scheme, client := "http", http.DefaultClient
	if secure {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", fmt.Errorf("building the request: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %w", req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("reading %s: %w", req.URL, err)
	}
	return resp.StatusCode, string(body), nil
}

// expectSecureMetrics checks the released manager's /metrics: refused without a token (401) and
// with the token of a ServiceAccount not bound to caplb-metrics-reader (403), served with one bound
// to it. It leaves mgr scraping with the bound token.
func expectSecureMetrics(ctx context.Context, t *testing.T, env *harness.Env, mgr *managerProcess, ns string) {
	t.Helper()
	g := NewWithT(t)
	// The metrics server starts after /readyz answers (it first makes its self-signed certificate).
	g.Eventually(func(g Gomega) {
		code, _, err := scrape(ctx, mgr.metricsAddr, true, "")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusForbidden), "no token, no metrics")
	}, timeout, harness.PollInterval).Should(Succeed())

	for _, name := range []string{"metrics-scraper", "not-a-scraper"} {
		g.Expect(env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	}
	g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "caplb-metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "metrics-scraper"}},
	})).To(Succeed())

	_, other := serviceAccountKubeconfig(ctx, t, env.Config, ns, "not-a-scraper")
	code, _, err := scrape(ctx, mgr.metricsAddr, true, other.BearerToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), "a valid token without caplb-metrics-reader is refused")

	_, reader := serviceAccountKubeconfig(ctx, t, env.Config, ns, "metrics-scraper")
	g.Eventually(func(g Gomega) {
		code, body, err := scrape(ctx, mgr.metricsAddr, true, reader.BearerToken)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("caplb_build_info{"))
	}, timeout, harness.PollInterval).Should(Succeed(), "a token bound to %s reads /metrics", metricsReaderRole)
	mgr.metricsToken = reader.BearerToken
}
