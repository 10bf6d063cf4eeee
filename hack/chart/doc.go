// Package chart renders, lints and packages charts/caplb with helm's Go library, and its tests keep
// the chart equal to the kustomize release (RBAC rules, CRDs, the manager's args and ports, the
// webhook) and the rendered agent configuration valid for the agent's own validator; one test
// installs, upgrades and uninstalls it on a real kube-apiserver and etcd (e2e/envtest), and one
// (root, Linux) runs three agents from the rendered config in an e2e/lab/arplab lab, which must
// elect exactly one owner of the VIP.
//
// It is a Go module of its own: helm.sh/helm/v3 v3.22.0 needs k8s.io v0.37 and brings a large
// dependency graph (oras, containerd, kubectl's packages) that the main module must not carry.
// `make test` and `make check` run it with their own lines (mk/chart.mk).
package chart
