package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// lbWideRow reads the LoadBalancer as `kubectl get lb -o wide` does, through the API server's
// Table printing of the CRD's printer columns, and returns the row by column name.
func (f *fixture) lbWideRow(g Gomega, name string) map[string]any {
	hc, err := rest.HTTPClientFor(f.s.env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	url := fmt.Sprintf("%s/apis/%s/namespaces/%s/loadbalancers/%s", strings.TrimSuffix(f.s.env.Config.Host, "/"), lbv1.GroupVersion, f.ns, name)
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s: %s", url, body)
	tbl := &metav1.Table{}
	g.Expect(json.Unmarshal(body, tbl)).To(Succeed())
	g.Expect(tbl.Rows).To(HaveLen(1))
	row := map[string]any{}
	for i, c := range tbl.ColumnDefinitions {
		row[c.Name] = tbl.Rows[0].Cells[i]
	}
	return row
}
