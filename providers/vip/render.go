package vip

import (
	"fmt"
	"net"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// Flavors of control-plane nodes: where each keeps its static pods, the kubelet's credential and
// the CA that verifies the local API server.
const (
	FlavorKubeadm = "kubeadm"
	FlavorK3s     = "k3s"
	FlavorRKE2    = "rke2"
)

// Flavor holds the node paths of one flavor.
type Flavor struct {
	// ManifestDir is the kubelet's static pod directory; the bootstrap writes the agent's
	// manifest there as caplb-agent.yaml.
	ManifestDir string
	// Kubeconfig is the kubelet's kubeconfig (the agent's Node API credential).
	Kubeconfig string
	// CAFile verifies the local API server.
	CAFile string
	// KubeletFiles are the files the kubeconfig refers to (client certificate and key, its CA),
	// mounted read-only one by one.
	KubeletFiles []string
	// KubeletDirs are directories the kubeconfig refers to (kubeadm rotates the client
	// certificate in /var/lib/kubelet/pki), mounted read-only.
	KubeletDirs []string
}

// Flavors maps spec.backend.<kind>.agent.flavor to its paths.
var Flavors = map[string]Flavor{
	FlavorKubeadm: {
		ManifestDir: "/etc/kubernetes/manifests",
		Kubeconfig:  "/etc/kubernetes/kubelet.conf",
		CAFile:      "/etc/kubernetes/pki/ca.crt",
		KubeletDirs: []string{"/var/lib/kubelet/pki"},
	},
	FlavorK3s: {
		ManifestDir: "/var/lib/rancher/k3s/agent/pod-manifests",
		Kubeconfig:  "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
		CAFile:      "/var/lib/rancher/k3s/server/tls/server-ca.crt",
		KubeletFiles: []string{
			"/var/lib/rancher/k3s/agent/client-kubelet.crt",
			"/var/lib/rancher/k3s/agent/client-kubelet.key",
			"/var/lib/rancher/k3s/agent/server-ca.crt",
		},
	},
	FlavorRKE2: {
		ManifestDir: "/var/lib/rancher/rke2/agent/pod-manifests",
		Kubeconfig:  "/var/lib/rancher/rke2/agent/kubelet.kubeconfig",
		CAFile:      "/var/lib/rancher/rke2/server/tls/server-ca.crt",
		KubeletFiles: []string{
			"/var/lib/rancher/rke2/agent/client-kubelet.crt",
			"/var/lib/rancher/rke2/agent/client-kubelet.key",
			"/var/lib/rancher/rke2/agent/server-ca.crt",
		},
	},
}

// Node paths every flavor shares.
const (
	// ConfigDir holds agent.yaml, gossip.key and the BGP password files.
	ConfigDir = "/etc/caplb"
	// StateDir keeps the newest membership the agent learned.
	StateDir = "/var/lib/caplb"
	// ManifestFile is the static pod manifest's file name in the flavor's ManifestDir.
	ManifestFile = "caplb-agent.yaml"
)

// PasswordKey is the bootstrap Secret key (and file name under /etc/caplb) holding peer i's
// TCP-MD5 password.
func PasswordKey(i int) string { return "bgp-" + strconv.Itoa(i) + ".password" }

// flavorOf returns the flavor name and paths, kubeadm by default.
func flavorOf(v *lbv1.VIPBackend) (string, Flavor) {
	name := v.Agent.Flavor
	if name == "" {
		name = FlavorKubeadm
	}
	return name, Flavors[name]
}

// renderInput is what rendering needs beyond the LoadBalancer.
type renderInput struct {
	vip        string
	membership agentv1.Membership
	// passwords lists the peers (by index) whose password the Secret carries.
	passwords map[int]bool
}

// renderConfig builds the agent configuration for lb. It leaves nodeName empty: the agent
// defaults it to the hostname, which must equal the kubelet's node name (the docs say how to
// pin it otherwise).
func renderConfig(lb *lbv1.LoadBalancer, in renderInput) agentv1.AgentConfiguration {
	v := lb.Spec.Backend.VIP()
	_, fl := flavorOf(v)
	c := agentv1.New()
	c.Mode = lb.Spec.Backend.Kind()
	c.VIPs = []string{in.vip}
	c.Port = int(lb.Spec.EffectiveTargetPort())
	for _, p := range v.ExtraPorts {
		c.ExtraPorts = append(c.ExtraPorts, int(p))
	}
	if a := lb.Spec.Backend.ARP; a != nil {
		c.Interface = v.Agent.Interface
		c.ARP.LoadBalancing = a.LoadBalancing
		// A takeover: kube-vip keeps the VIP until it lets go (the fence Lease); the agents claim
		// it only once nobody answers ARP for it. BGP agents never wait: announcing beside
		// kube-vip's nodes is safe (the routers spread connections by ECMP), so they announce as
		// soon as they are healthy members.
		c.ARP.ClaimWhenSilent = a.TakeOver != nil && a.TakeOver.KubeVIP != nil
	}
	c.Members = append([]agentv1.MemberConfig{}, in.membership.Members...)
	c.Membership = agentv1.MembershipConfig{Dynamic: true, Version: in.membership.Version}
	c.NodeAPI = agentv1.NodeAPIConfig{Kubeconfig: fl.Kubeconfig}
	c.Health = renderHealth(v.Agent, fl, c.Port)
	c.Admin.Listen = renderAdminListen(v.Agent.Metrics)
	c.Election.SecretKeyFile = agentv1.GossipKeyPath
	c.Election.Label = lb.Namespace + "/" + lb.Name
	c.LoadBalancer = agentv1.LoadBalancerIdentity{Namespace: lb.Namespace, Name: lb.Name, Cluster: lb.Spec.ClusterName}
	if t := v.Agent.Timers; t != nil {
		setDuration(&c.Election.ProbeInterval, t.ProbeInterval)
		setDuration(&c.Election.ProbeTimeout, t.ProbeTimeout)
		setDuration(&c.Election.ContactTimeout, t.ContactTimeout)
		setDuration(&c.Election.Settle, t.Settle)
		setDuration(&c.Quiesce.Drain, t.Drain)
		setDuration(&c.Quiesce.BusyDrain, t.BusyDrain)
	}
	if b := lb.Spec.Backend.BGP; b != nil {
		bc := &agentv1.BGPConfig{ASN: uint32(b.ASN), Communities: append([]string(nil), b.Communities...)}
		for i, p := range b.Peers {
			peer := agentv1.BGPPeer{
				Address:       p.Address,
				ASN:           uint32(p.ASN),
				Port:          uint16(p.Port),
				EBGPMultihop:  uint8(p.EBGPMultihop),
				HoldTime:      p.HoldTime.Meta(),
				KeepaliveTime: p.KeepaliveTime.Meta(),
				ConnectRetry:  p.ConnectRetry.Meta(),
			}
			if in.passwords[i] {
				peer.PasswordFile = path.Join(ConfigDir, PasswordKey(i))
			}
			if f := p.BFD; f != nil {
				peer.BFD = &agentv1.BFDConfig{MinRx: f.MinRx.Meta(), MinTx: f.MinTx.Meta(), Multiplier: uint8(f.Multiplier)}
			}
			bc.Peers = append(bc.Peers, peer)
		}
		c.BGP = bc
	}
	return c
}

// RenderAgentConfig is the agent configuration the manager writes into lb's bootstrap Secret
// (agent.yaml) for the VIP vip and membership m, checked by the agent's own validation.
// passwords lists the BGP peers (by index) whose TCP-MD5 password the Secret carries. Labs that
// boot machines without a manager render their agents' files with it, so they run what a user's
// node runs.
func RenderAgentConfig(lb *lbv1.LoadBalancer, vip string, m agentv1.Membership, passwords map[int]bool) (agentv1.AgentConfiguration, error) {
	cfg := renderConfig(lb, renderInput{vip: vip, membership: m, passwords: passwords})
	if err := validateRendered(cfg); err != nil {
		return agentv1.AgentConfiguration{}, err
	}
	return cfg, nil
}

// RenderAgentManifest is the agent's static pod the manager writes into lb's bootstrap Secret
// (caplb-agent.yaml), running image.
func RenderAgentManifest(lb *lbv1.LoadBalancer, image string) ([]byte, error) {
	return renderManifest(lb, image)
}

// renderHealth builds the agent's health check from spec.backend.<kind>.agent.health. Unset
// (or https on the defaults) it is exactly the API server check caplb always rendered.
func renderHealth(a lbv1.AgentSpec, fl Flavor, port int) agentv1.HealthConfig {
	h := a.Health
	if h == nil {
		h = &lbv1.AgentHealth{}
	}
	if h.Port != 0 {
		port = int(h.Port)
	}
	local := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	switch h.Type {
	case lbv1.AgentHealthHTTP:
		return agentv1.HealthConfig{Type: agentv1.HealthHTTP, URL: "http://" + local + pathOr(h.Path, "/healthz")}
	case lbv1.AgentHealthTCP:
		return agentv1.HealthConfig{Type: agentv1.HealthTCP, Address: local}
	}
	ca := a.CAFile
	if ca == "" {
		ca = fl.CAFile
	}
	hc := agentv1.HealthConfig{CAFile: ca, ServerName: agentv1.DefaultHealthServerName}
	if h.Type != "" {
		hc.Type = agentv1.HealthHTTPS
	}
	if h.Port != 0 || h.Path != "" {
		hc.URL = "https://" + local + pathOr(h.Path, "/readyz")
	}
	return hc
}

func pathOr(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

// healthUsesCA says whether the agent's health check reads the CA file (https), so the static
// pod mounts it; a worker node checked over http or tcp may have no such file, and a missing
// File mount would hold the pod.
func healthUsesCA(a lbv1.AgentSpec) bool {
	return a.Health == nil || a.Health.Type == "" || a.Health.Type == lbv1.AgentHealthHTTPS
}

func setDuration(d *agentv1.Duration, v *lbv1.Duration) {
	if v != nil {
		d.Duration = v.Duration
	}
}

// validateRendered runs the agent's own Default and Validate on a copy of c, with a stand-in
// node name (the real one is the node's hostname, known only there): the manager never hands
// out a file the agent would refuse.
func validateRendered(c agentv1.AgentConfiguration) error {
	cp := c
	cp.Members = append([]agentv1.MemberConfig(nil), c.Members...)
	if c.BGP != nil {
		b := *c.BGP
		cp.BGP = &b
	}
	if cp.NodeName == "" {
		cp.NodeName = "rendered-by-manager"
	}
	cp.Default()
	if err := cp.Validate(); err != nil {
		return fmt.Errorf("rendered agent configuration is invalid: %w", err)
	}
	return nil
}

// marshalConfig writes c as YAML without the zero values (which mean "default" in the agent's
// schema), so the file shows only what the manager chose.
func marshalConfig(c agentv1.AgentConfiguration) ([]byte, error) {
	return marshalPruned(c, true)
}

// renderManifest builds the agent's static pod.
func renderManifest(lb *lbv1.LoadBalancer, image string) ([]byte, error) {
	v := lb.Spec.Backend.VIP()
	_, fl := flavorOf(v)
	ca := v.Agent.CAFile
	if ca == "" {
		ca = fl.CAFile
	}
	fileType := corev1.HostPathFile
	dirType := corev1.HostPathDirectory
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	// The kubelet retries a mount whose file is not there yet (kubeadm join writes kubelet.conf
	// after TLS bootstrap), so File types delay the agent rather than create directories in
	// place of missing files.
	mounts := []HostMount{
		{Name: "config", Path: ConfigDir, Type: dirType, ReadOnly: true},
		{Name: "state", Path: StateDir, Type: dirOrCreate},
		// The control socket (POST /quiesce on the node, root only) lives here: the root
		// filesystem is read-only.
		{Name: "run", Path: path.Dir(agentv1.DefaultControlSocket), Type: dirOrCreate},
	}
	if healthUsesCA(v.Agent) {
		mounts = append(mounts, HostMount{Name: "ca", Path: ca, Type: fileType, ReadOnly: true})
	}
	mounts = append(mounts, HostMount{Name: "kubeconfig", Path: fl.Kubeconfig, Type: fileType, ReadOnly: true})
	for i, f := range fl.KubeletFiles {
		mounts = append(mounts, HostMount{Name: "kubelet-" + strconv.Itoa(i), Path: f, Type: fileType, ReadOnly: true})
	}
	for i, d := range fl.KubeletDirs {
		mounts = append(mounts, HostMount{Name: "kubelet-dir-" + strconv.Itoa(i), Path: d, Type: dirOrCreate, ReadOnly: true})
	}
	return AgentPod{
		Component: lb.Spec.Backend.Kind(),
		Image:     image,
		Command:   []string{"caplb-agent", "--config", agentv1.ConfigPath},
		Mounts:    mounts,
		Caps:      []corev1.Capability{"NET_ADMIN", "NET_RAW"},
	}.Render()
}

// HostMount is one hostPath volume of the agent's static pod, mounted at the same path.
type HostMount struct {
	Name, Path string
	Type       corev1.HostPathType
	ReadOnly   bool
}

// AgentPod is the caplb-agent static pod every backend with a node agent renders: host network,
// node-critical, read-only root filesystem, only the capabilities it names.
type AgentPod struct {
	// Component labels the pod (app.kubernetes.io/component): the backend kind.
	Component string
	Image     string
	Command   []string
	Mounts    []HostMount
	Caps      []corev1.Capability
}

// Render returns the static pod manifest (YAML).
func (a AgentPod) Render() ([]byte, error) {
	var (
		vols   []corev1.Volume
		mounts []corev1.VolumeMount
	)
	for _, m := range a.Mounts {
		t := m.Type
		vols = append(vols, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: m.Path, Type: &t}}})
		mounts = append(mounts, corev1.VolumeMount{Name: m.Name, MountPath: m.Path, ReadOnly: m.ReadOnly})
	}
	no, yes := false, true
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "caplb-agent",
			Namespace: "kube-system",
			Labels: map[string]string{
				"app.kubernetes.io/name":      "caplb-agent",
				"app.kubernetes.io/component": a.Component,
			},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name:    "caplb-agent",
				Image:   a.Image,
				Command: a.Command,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					// A CPU request gives the agent a share under load, so its 100 ms probes
					// are not starved into false failovers.
					corev1.ResourceCPU:    resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Capabilities: &corev1.Capabilities{
						Add:  a.Caps,
						Drop: []corev1.Capability{"ALL"},
					},
				},
				VolumeMounts: mounts,
			}},
			Volumes: vols,
		},
	}
	// Only nulls and empty objects go: false is meaningful in a security context.
	return marshalPruned(pod, false)
}

// MarshalConfig writes a configuration as YAML without its zero values (which mean "default"
// in caplb's agent and gateway schemas), so a rendered file shows only what the manager chose.
func MarshalConfig(v any) ([]byte, error) { return marshalPruned(v, true) }

// marshalPruned marshals v to YAML, dropping nulls and empty maps and lists, and with zeros also
// empty strings, false, 0 and "0s".
func marshalPruned(v any, zeros bool) ([]byte, error) {
	j, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	pruned, _ := prune(m, zeros).(map[string]any)
	return yaml.Marshal(pruned)
}

func prune(v any, zeros bool) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if p := prune(x, zeros); p == nil {
				delete(t, k)
			} else {
				t[k] = p
			}
		}
		if len(t) == 0 {
			return nil
		}
		return t
	case []any:
		out := t[:0]
		for _, x := range t {
			if p := prune(x, zeros); p != nil {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case string:
		if zeros && (t == "" || t == "0s") {
			return nil
		}
	case bool:
		if zeros && !t {
			return nil
		}
	case float64:
		if zeros && t == 0 {
			return nil
		}
	case int64:
		if zeros && t == 0 {
			return nil
		}
	case nil:
		return nil
	}
	return v
}
