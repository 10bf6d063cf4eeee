// Package kubevip judges whether caplb can take a control-plane VIP over from a running
// kube-vip, from the kube-vip mirror Pods the workload cluster's API returns. It does no I/O:
// the caller lists the Pods (kube-system, through the ClusterCache) and sets the condition the
// answer carries. See docs/migrate-from-kube-vip.md.
package kubevip

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// kube-vip's environment variables (pkg/kubevip/config_envvar.go) and command-line flags
// (cmd/kube-vip.go) for the settings the check reads. kube-vip parses its flags first and lets
// every non-empty environment variable override them, so the env wins here too.
const (
	envAddress       = "address"
	envVIPAddress    = "vip_address" // older manifests; address wins when both are set
	envARP           = "vip_arp"
	envLeaderElect   = "vip_leaderelection"
	envLeaseName     = "vip_leasename"
	envLeaseDuration = "vip_leaseduration"
	envNamespace     = "cp_namespace"
	envControlPlane  = "cp_enable"
	envServices      = "svc_enable"
	envBGP           = "bgp_enable"
	envPreserve      = "vip_preserve_on_leadership_loss"
	envConfigFile    = "config_file"
	envInterface     = "vip_interface"
)

// kube-vip's defaults (cmd/kube-vip.go) for the settings above.
const (
	defaultLeaseName     = "plndr-cp-lock"
	defaultNamespace     = "kube-system"
	defaultLeaseDuration = 15
	electionKubernetes   = "kubernetes"
	electionEtcd         = "etcd"
)

// settings is the configuration one kube-vip mirror Pod runs with, as kube-vip would resolve it.
type settings struct {
	pod, node string

	address        string // address, else vip_address; may be a DNS name or a comma-separated list
	addressSource  string // the env var or flag it came from, for messages
	controlPlane   bool
	arp            bool
	bgp            bool
	leaderElection bool
	electionType   string
	leaseNamespace string
	leaseName      string
	leaseDuration  int
	preserve       bool
	services       bool
	iface          string
	// peers and annotations are read for a BGP kube-vip only.
	peers       []peer
	annotations string
}

// compared lists the settings the mirror Pods must agree on, with the name a user finds in the
// manifest: a check on one Pod's values must hold for all.
func (s *settings) compared() [][2]string {
	return [][2]string{
		{s.addressSource, s.address},
		{envControlPlane, strconv.FormatBool(s.controlPlane)},
		{envARP, strconv.FormatBool(s.arp)},
		{envBGP, strconv.FormatBool(s.bgp)},
		{envLeaderElect, strconv.FormatBool(s.leaderElection)},
		{"--leaderElectionType", s.electionType},
		{envNamespace, s.leaseNamespace},
		{envLeaseName, s.leaseName},
		{envPreserve, strconv.FormatBool(s.preserve)},
		{envServices, strconv.FormatBool(s.services)},
		{envBGPPeers + "/" + envBGPPeerAddress, peersString(s.peers)},
		{envAnnotations, s.annotations},
	}
}

// container returns the Pod's kube-vip container: the one named kube-vip, else the first whose
// image's repository is .../kube-vip (ghcr.io/kube-vip/kube-vip, plndr/kube-vip); nil if none.
func container(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "kube-vip" {
			return &p.Spec.Containers[i]
		}
	}
	for i := range p.Spec.Containers {
		img := p.Spec.Containers[i].Image
		if at := strings.IndexByte(img, '@'); at >= 0 {
			img = img[:at]
		}
		repo := path.Base(img)
		if c := strings.IndexByte(repo, ':'); c >= 0 {
			repo = repo[:c]
		}
		if repo == "kube-vip" {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}

// flags collects the long flags (--name=value, --name value, --name for booleans) and -n of a
// kube-vip command line. Whether a flag takes a value is kube-vip's: bools never consume the
// next word (pflag's rule), the others always do.
func flags(words []string) map[string]string {
	bools := map[string]bool{"arp": true, "leaderElection": true, "bgp": true, "controlplane": true, "multihop": true,
		"services": true, "preserveVipOnLeadershipLoss": true}
	out := map[string]string{}
	for i := 0; i < len(words); i++ {
		w := words[i]
		var name string
		switch {
		case strings.HasPrefix(w, "--"):
			name = w[2:]
		case w == "-n" || strings.HasPrefix(w, "-n="):
			name = "namespace" + strings.TrimPrefix(w, "-n")
		default:
			continue
		}
		if k, v, ok := strings.Cut(name, "="); ok {
			out[k] = v
			continue
		}
		if bools[name] {
			out[name] = "true"
			continue
		}
		if i+1 < len(words) {
			out[name] = words[i+1]
			i++
		}
	}
	return out
}

// parse resolves one mirror Pod's settings. An error names the setting that cannot be read and
// says why; the check turns it into a KubeVIPConfigUnreadable refusal.
func parse(p *corev1.Pod, c *corev1.Container) (*settings, error) {
	words := append([]string{}, c.Command...)
	if len(words) > 0 {
		words = words[1:] // the program
	}
	fl := flags(append(words, c.Args...))
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			// A ConfigMap, Secret or field reference is resolved by the kubelet on the node; a
			// guess here could pass a configuration kube-vip does not run with.
			env[e.Name] = "\x00valueFrom"
			continue
		}
		env[e.Name] = e.Value
	}
	s := &settings{pod: p.Name, node: p.Spec.NodeName}
	var errs []string
	str := func(envName, flag, def string) (string, string) {
		if v := env[envName]; v != "" {
			if v == "\x00valueFrom" {
				errs = append(errs, fmt.Sprintf("env %s is set with valueFrom, which only the node resolves: write the value inline", envName))
				return "", envName
			}
			return v, envName
		}
		if v, ok := fl[flag]; ok && flag != "" {
			return v, "--" + flag
		}
		return def, envName
	}
	boolean := func(envName, flag string) bool {
		v, src := str(envName, flag, "false")
		b, err := strconv.ParseBool(v)
		if err != nil && v != "" {
			errs = append(errs, fmt.Sprintf("%s=%q is not a boolean (kube-vip would not start with it either)", src, v))
		}
		return b
	}
	if _, ok := env[envConfigFile]; ok {
		errs = append(errs, fmt.Sprintf("env %s names a configuration file on the node, which the manager cannot read: move its settings into env", envConfigFile))
	}
	if _, ok := fl["config-file"]; ok {
		errs = append(errs, "--config-file names a configuration file on the node, which the manager cannot read: move its settings into env")
	}
	s.address, s.addressSource = str(envAddress, "address", "")
	if s.address == "" {
		s.address, s.addressSource = str(envVIPAddress, "vip", "")
	}
	if s.address == "" {
		s.addressSource = envAddress
	}
	s.controlPlane = boolean(envControlPlane, "controlplane")
	s.arp = boolean(envARP, "arp")
	s.bgp = boolean(envBGP, "bgp")
	s.leaderElection = boolean(envLeaderElect, "leaderElection")
	s.preserve = boolean(envPreserve, "preserveVipOnLeadershipLoss")
	s.services = boolean(envServices, "services")
	s.iface, _ = str(envInterface, "interface", "")
	// The election type has no environment variable: only the flag sets it.
	s.electionType = electionKubernetes
	if v, ok := fl["leaderElectionType"]; ok {
		s.electionType = v
	}
	s.leaseNamespace, _ = str(envNamespace, "namespace", defaultNamespace)
	s.leaseName, _ = str(envLeaseName, "leaseName", defaultLeaseName)
	// kube-vip (v1.x) reads "<namespace>/<name>" in the lease name as both.
	if ns, name, ok := strings.Cut(s.leaseName, "/"); ok {
		s.leaseNamespace, s.leaseName = ns, name
	}
	d, src := str(envLeaseDuration, "leaseDuration", strconv.Itoa(defaultLeaseDuration))
	if n, err := strconv.Atoi(d); err != nil || n <= 0 {
		errs = append(errs, fmt.Sprintf("%s=%q is not a positive number of seconds", src, d))
	} else {
		s.leaseDuration = n
	}
	if s.bgp {
		s.peers, s.annotations = bgpPeers(str, &errs)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return s, nil
}

// bgpPeers reads a BGP kube-vip's routers as its manager does (peers.go), through parse's str;
// an unreadable one adds to errs.
func bgpPeers(str func(envName, flag, def string) (string, string), errs *[]string) (peers []peer, annotations string) {
	if v, _ := str(envBGPPeers, "", ""); v != "" {
		ps, err := parsePeers(v)
		if err != nil {
			*errs = append(*errs, fmt.Sprintf("%s: %v (kube-vip would not start with it either)", envBGPPeers, err))
		}
		peers = ps
	}
	if addr, _ := str(envBGPPeerAddress, "", ""); addr != "" {
		as, src := str(envBGPPeerAS, "peerAS", strconv.Itoa(defaultPeerAS))
		n, err := strconv.ParseUint(as, 10, 32)
		if err != nil {
			*errs = append(*errs, fmt.Sprintf("%s=%q is not an AS number (kube-vip would not start with it either)", src, as))
		}
		peers = append(peers, peer{address: addr, asn: uint32(n), source: envBGPPeerAddress})
	}
	annotations, _ = str(envAnnotations, "annotations", "")
	return peers, annotations
}
