//go:build tools

// Package tools pins the main packages hack/testbin.sh builds, so that
// `go mod tidy` in this module keeps their dependencies. It is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
