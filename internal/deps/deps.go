// Package deps pins the project's direct dependencies while the packages that
// use them are being written, so that `go mod tidy` keeps them. Remove an
// import here once real code imports the package.
package deps

import (
	_ "github.com/hashicorp/memberlist"
	_ "github.com/mdlayher/arp"
	_ "github.com/mdlayher/ndp"
	_ "github.com/mdlayher/packet"
	_ "github.com/onsi/gomega"
	_ "github.com/osrg/gobgp/v3/pkg/server"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/cluster-api/api/core/v1beta2"
	_ "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	_ "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	_ "sigs.k8s.io/cluster-api/util/kubeconfig"
	_ "sigs.k8s.io/cluster-api/util/patch"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
)
