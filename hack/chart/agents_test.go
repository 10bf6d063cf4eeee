//go:build linux

package chart

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/caplb/caplb/e2e/lab"
	"github.com/caplb/caplb/e2e/lab/arplab"
)

// TestRenderedAgentsElectOneOwner runs three real agents from what the chart renders: the
// ConfigMap's agent.yaml and the generated gossip Secret, byte for byte, mounted where the
// DaemonSet's pod mounts them, each agent started by the lab's kubelet (podrun) from the
// DaemonSet's pod template with the node's hostname (nodeName is the pod's hostname). They
// must elect exactly one owner of the VIP, agree on it in /status, and hand over to exactly one
// other when the owner's pod is deleted. Agents given different keys or member lists would not
// agree: the test fails on a chart that renders either wrong.
func TestRenderedAgentsElectOneOwner(t *testing.T) {
	l := lab.NewT(t, "chartagents")
	g := NewWithT(t)
	bins := buildLabBinaries(t)

	var image string // the DaemonSet's, mapped to the agent binary
	c, err := arplab.StartCluster(l, arplab.ClusterOptions{
		StandinBinary: bins.standin,
		// No agent until the chart is rendered for the lab's nodes and each node's root written.
		Idle: func(int) bool { return true },
		AgentArgv: func(n *arplab.Node) []string {
			root, rootfs := nodeRoot(l, n.Name)
			return []string{"unshare", "--mount", "--uts", "--propagation", "private",
				bins.podrun, "-root", root, "-rootfs", rootfs, "-manifest", agentManifest,
				"-hostname", n.Name, "-image", image + "=" + bins.agent}
		},
	})
	g.Expect(err).NotTo(HaveOccurred(), "start the ARP lab")

	objs, err := Render(load(t), ns, labValues(c))
	g.Expect(err).NotTo(HaveOccurred())
	pod, files, err := agentPod(objs)
	g.Expect(err).NotTo(HaveOccurred())
	image = pod.image
	ca, err := os.ReadFile(c.PKI.CAFile)
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range c.Nodes {
		root, rootfs := nodeRoot(l, n.Name)
		g.Expect(writeNodeRoot(root, rootfs, pod.manifest, files, ca)).To(Succeed())
		g.Expect(c.StartAgent(n)).To(Succeed())
	}

	owner := waitOneOwner(t, c, nil)
	t.Logf("%s owns %s", owner.Name, arplab.VIPv4)
	// Deleting the owner's pod: SIGTERM, SIGKILL after the pod's grace period. The agent hands
	// the VIP over and removes it from its interface, so the kernels again show one holder.
	g.Expect(owner.Agent.Stop(pod.grace)).To(Succeed(), "the agent exits within the pod's grace period")
	next := waitOneOwner(t, c, owner)
	t.Logf("%s took %s over from %s", next.Name, arplab.VIPv4, owner.Name)
}

// waitOneOwner waits until exactly one kernel holds the VIP (not gone's), the client reaches
// that node through it, and every running agent's /status names it owner and itself by the
// member name its hostname gave it.
func waitOneOwner(t *testing.T, c *arplab.Cluster, gone *arplab.Node) *arplab.Node {
	t.Helper()
	var owner string
	NewWithT(t).Eventually(func(g Gomega) {
		for _, n := range c.Nodes {
			if exited, err := n.Agent.Exited(); exited && n != gone {
				// A refused configuration or key: no use waiting out the deadline.
				StopTrying(fmt.Sprintf("%s's agent exited: %v (its log follows)", n.Name, err)).Now()
			}
		}
		holders, err := c.Holders(arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(holders).To(HaveLen(1), "nodes holding %s", arplab.VIPv4)
		if gone != nil {
			g.Expect(holders[0]).NotTo(Equal(gone.Name), "the stopped agent still holds the VIP")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, n := range c.Nodes {
			if n == gone {
				continue
			}
			s, err := n.Status(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Node).To(Equal(n.Name), "nodeName from the pod's hostname")
			g.Expect(s.Owner).To(Equal(holders[0]), "%s's owner", n.Name)
		}
		who, err := c.Connect(ctx, arplab.VIPv4)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(who).To(Equal(holders[0]), "the node answering on the VIP")
		owner = holders[0]
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	return c.Node(owner)
}

// labValues turns the agent on for the lab's segment: its VIP, its nodes as members and the
// stand-in's /readyz port (the stand-in serves the VIP's port itself). No
// agent.gossip.existingSecret: the chart generates the key, so its Secret is under test too.
func labValues(c *arplab.Cluster) map[string]any {
	members := []any{}
	for _, n := range c.Nodes {
		members = append(members, map[string]any{"name": n.Name, "address": n.Addr4.String()})
	}
	return map[string]any{"agent": map[string]any{
		"enabled": true,
		"config": map[string]any{
			"mode":    "arp",
			"vips":    []any{arplab.VIPv4.String()},
			"port":    arplab.APIPort,
			"members": members,
			"health":  map[string]any{"url": "https://127.0.0.1:" + strconv.Itoa(arplab.ReadyzPort) + "/readyz"},
		},
	}}
}

// agentManifest is where the pod's manifest is written in each node's root.
const agentManifest = "/etc/kubernetes/manifests/caplb-agent.yaml"

// nodeRoot is a node's "/" and the scratch directory podrun builds the container's root in.
func nodeRoot(l *lab.Lab, node string) (root, rootfs string) {
	dir := filepath.Join(l.Dir(), "machines", node)
	return filepath.Join(dir, "root"), filepath.Join(dir, "rootfs")
}

// renderedPod is the DaemonSet's pod as the lab kubelet runs it.
type renderedPod struct {
	manifest []byte
	image    string
	grace    time.Duration
}

// kubeletVolumes is where, in a node's root, the lab plays the kubelet's projection of the
// pod's configMap and secret volumes.
const kubeletVolumes = "/var/lib/kubelet/pods/caplb-agent/volumes"

// agentPod turns the rendered DaemonSet into a pod manifest and the files the kubelet would
// project for its configMap and secret volumes (path in the node's root -> content, mode).
// The one rewrite: those volumes become hostPath volumes of the projected directories, since
// podrun runs hostPath volumes only; mounts, subPaths and every path in agent.yaml stay as
// rendered.
func agentPod(objs []*unstructured.Unstructured) (renderedPod, map[string]projected, error) {
	idx := Index(objs)
	ds := idx["DaemonSet/"+ns+"/caplb-agent"]
	if ds == nil {
		return renderedPod{}, nil, fmt.Errorf("no agent DaemonSet rendered")
	}
	spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	vols, _, _ := unstructured.NestedSlice(spec, "volumes")
	files := map[string]projected{}
	for i, v := range vols {
		vol := v.(map[string]any)
		name := vol["name"].(string)
		var data map[string]string
		var mode int64 = 0o644
		var kind string
		switch {
		case vol["configMap"] != nil:
			kind = "configmap"
			cmName, _, _ := unstructured.NestedString(vol, "configMap", "name")
			cm := idx["ConfigMap/"+ns+"/"+cmName]
			if cm == nil {
				return renderedPod{}, nil, fmt.Errorf("volume %s: ConfigMap %s not rendered", name, cmName)
			}
			data, _, _ = unstructured.NestedStringMap(cm.Object, "data")
		case vol["secret"] != nil:
			kind = "secret"
			secretName, _, _ := unstructured.NestedString(vol, "secret", "secretName")
			s := idx["Secret/"+ns+"/"+secretName]
			if s == nil {
				return renderedPod{}, nil, fmt.Errorf("volume %s: Secret %s not rendered", name, secretName)
			}
			enc, _, _ := unstructured.NestedStringMap(s.Object, "data")
			data = map[string]string{}
			for k, b64 := range enc {
				b, err := base64.StdEncoding.DecodeString(b64)
				if err != nil {
					return renderedPod{}, nil, fmt.Errorf("Secret %s key %s: %w", secretName, k, err)
				}
				data[k] = string(b)
			}
			if m, ok, _ := unstructured.NestedFieldNoCopy(vol, "secret", "defaultMode"); ok {
				mode = toInt64(m)
			}
		default:
			continue // hostPath: the node's own files (writeNodeRoot)
		}
		dir := filepath.Join(kubeletVolumes, "kubernetes.io~"+kind, name)
		for k, content := range data {
			files[filepath.Join(dir, k)] = projected{content: []byte(content), mode: os.FileMode(mode)}
		}
		vols[i] = map[string]any{"name": name, "hostPath": map[string]any{"path": dir, "type": "Directory"}}
	}
	spec["volumes"] = vols
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "caplb-agent", "namespace": ns}, "spec": spec}
	manifest, err := yaml.Marshal(pod)
	if err != nil {
		return renderedPod{}, nil, fmt.Errorf("agent pod manifest: %w", err)
	}
	containers, _, _ := unstructured.NestedSlice(spec, "containers")
	if len(containers) != 1 {
		return renderedPod{}, nil, fmt.Errorf("agent pod: want one container, have %d", len(containers))
	}
	grace := time.Duration(toInt64(spec["terminationGracePeriodSeconds"])) * time.Second
	return renderedPod{manifest: manifest, image: containers[0].(map[string]any)["image"].(string), grace: grace}, files, nil
}

// projected is one file of a configMap or secret volume.
type projected struct {
	content []byte
	mode    os.FileMode
}

// toInt64 reads a number decoded from YAML (int64 or float64).
func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}

// kubeadmNodeFiles are the host files the DaemonSet mounts, as a kubeadm control-plane node has
// them: the cluster CA (the lab's, which signed the stand-ins' serving certificate) and the
// kubelet's kubeconfig, which the agent does not read without agent.config.nodeAPI. The
// kubelet's PKI directory is mounted too (kubeadmNodeDirs).
func kubeadmNodeFiles(ca []byte) map[string][]byte {
	return map[string][]byte{
		"/etc/kubernetes/pki/ca.crt":   ca,
		"/etc/kubernetes/kubelet.conf": []byte("# not read: no nodeAPI in agent.config\n"),
	}
}

var kubeadmNodeDirs = []string{"/var/lib/kubelet/pki"}

// writeNodeRoot writes a node's root: its kubeadm files, the projected volumes and the pod's
// manifest.
func writeNodeRoot(root, rootfs string, manifest []byte, files map[string]projected, ca []byte) error {
	all := map[string]projected{agentManifest: {content: manifest, mode: 0o600}}
	for p, b := range kubeadmNodeFiles(ca) {
		all[p] = projected{content: b, mode: 0o644}
	}
	for p, f := range files {
		all[p] = f
	}
	for p, f := range all {
		path := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("node root: %w", err)
		}
		if err := os.WriteFile(path, f.content, f.mode); err != nil {
			return fmt.Errorf("node root: %w", err)
		}
	}
	dirs := []string{rootfs}
	for _, d := range kubeadmNodeDirs {
		dirs = append(dirs, filepath.Join(root, d))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("node root: %w", err)
		}
	}
	return nil
}

// labBinaries are the agent, the stand-in API server and the lab kubelet.
type labBinaries struct{ agent, standin, podrun string }

// buildLabBinaries builds them in the main module (lab.BuildBinary builds in the module of the
// working directory, this one), with its go.mod's versions, as the release does; static, as
// podrun's container root holds nothing but the binary.
func buildLabBinaries(t *testing.T) labBinaries {
	t.Helper()
	dir := t.TempDir()
	mod, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/caplb-agent", "./e2e/lab/standin", "./e2e/lab/podrun")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the lab's binaries: %v\n%s", err, out)
	}
	return labBinaries{agent: filepath.Join(dir, "caplb-agent"), standin: filepath.Join(dir, "standin"),
		podrun: filepath.Join(dir, "podrun")}
}
