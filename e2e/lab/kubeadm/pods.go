//go:build linux

package kubeadm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/caplb/caplb/e2e/lab"
)

// Binaries are what the lab's kubelet runs for the static pods' images: the lab kubelet
// (podrun), the etcd and kube-apiserver binaries of `make testbin` for kubeadm's, and
// optionally caplb's agent for the caplb-agent.yaml a bootstrap wrote (e2e/realcp).
type Binaries struct {
	Podrun, Etcd, APIServer string
	// ControllerManager runs kubeadm's kube-controller-manager manifest (optional).
	ControllerManager string
	Agent             string
	// KubeVIP runs kube-vip's static pod (KubeVIPManifest), when a machine has one.
	KubeVIP string
}

// KubeVIPManifest is where a cluster that runs kube-vip has its static pod (CAPV's templates
// write it there through KubeadmControlPlane's files).
const KubeVIPManifest = ManifestsDir + "/kube-vip.yaml"

// kubeVIPEntrypoint is the kube-vip image's ENTRYPOINT: its manifests give only args.
const kubeVIPEntrypoint = "/kube-vip"

// AgentManifest is where caplb's bootstrap writes the agent's static pod on a kubeadm node
// (providers/vip: the flavor's manifest directory and ManifestFile).
const AgentManifest = ManifestsDir + "/caplb-agent.yaml"

// Kubelet runs a machine's static pods the way the kubelet does, one podrun per manifest, in
// the machine's network namespace.
type Kubelet struct {
	NS      *lab.Netns
	Machine Machine
	Bins    Binaries
	// Scratch is a host directory for the containers' roots (one per pod).
	Scratch string
}

// Start runs the static pod whose manifest is at manifest (a path on the machine), mapping its
// image to the binary for it, and returns the process.
func (k Kubelet) Start(manifest string) (*lab.Process, error) {
	pod := strings.TrimSuffix(filepath.Base(manifest), ".yaml")
	var bin, entrypoint string
	switch pod {
	case "kube-vip":
		bin, entrypoint = k.Bins.KubeVIP, kubeVIPEntrypoint
	case "etcd":
		bin = k.Bins.Etcd
	case "kube-apiserver":
		bin = k.Bins.APIServer
	case "kube-controller-manager":
		bin = k.Bins.ControllerManager
	case "caplb-agent":
		bin = k.Bins.Agent
	}
	if bin == "" {
		return nil, fmt.Errorf("static pod %s: the lab has no binary for it", pod)
	}
	rootfs := filepath.Join(k.Scratch, k.Machine.Name, pod)
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return nil, err
	}
	// Any image: each podrun runs one manifest, and kubeadm names the image by its registry
	// and tag (registry.k8s.io/etcd:<v>, registry.k8s.io/kube-apiserver:<v>), caplb by the
	// manager's --agent-image.
	argv := []string{"unshare", "--mount", "--uts", "--propagation", "private",
		k.Bins.Podrun, "-root", k.Machine.Root, "-rootfs", rootfs, "-manifest", manifest,
		"-hostname", k.Machine.Name, "-image", "*=" + bin}
	if entrypoint != "" {
		argv = append(argv, "-entrypoint", entrypoint)
	}
	return k.NS.Start(k.Machine.Name+"-"+pod, argv, nil)
}
