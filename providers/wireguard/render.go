package wireguard

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	wg "github.com/caplb/caplb/api/wireguard/v1alpha1"
	"github.com/caplb/caplb/providers/vip"
)

// Keys of the members' bootstrap Secret (<clusterName>-caplb-agent, the arp and bgp backends'
// name: one cluster has one backend) and where the bootstrap writes them on the node.
const (
	// MemberConfigKey holds the member's configuration (caplb-agent wireguard --config).
	MemberConfigKey = "wireguard.yaml"
	// TokenKey holds the cluster's join token, in the bootstrap, gateway and token Secrets.
	TokenKey = wg.SecretTokenKey
	// MemberConfigPath and MemberTokenPath are the files on the node (mode 0600).
	MemberConfigPath = vip.ConfigDir + "/" + MemberConfigKey
	MemberTokenPath  = vip.ConfigDir + "/" + TokenKey
	// MemberKeyDir holds the member's private key, generated on the node.
	MemberKeyDir = "/var/lib/caplb/wireguard"
)

// Keys of the gateways' Secret (<clusterName>-caplb-gateway).
const (
	// CAKey holds the Cluster's CA certificate (public), copied from <clusterName>-ca, which the
	// gateways verify the members' /readyz with. Absent until the Cluster has a CA.
	CAKey = wg.SecretCAKey
	// QuiescedKey holds the nodes every gateway must keep out of rotation (JSON list).
	QuiescedKey = wg.SecretQuiescedKey
)

// GatewayConfigKey is the key of one gateway's configuration in the gateways' Secret.
func GatewayConfigKey(gateway string) string { return wg.SecretGatewayKey(gateway) }

// GatewayDir is where a gateway host keeps one cluster's files: the join token and CA from the
// Secret, its own key and state file. One directory per cluster, so that several clusters'
// gateway processes share a host.
func GatewayDir(lb *lbv1.LoadBalancer) string {
	return path.Join("/var/lib/caplb/wireguard", lb.Namespace, lb.Spec.ClusterName)
}

// registrationPort is the gateway's TCP registration port: its UDP port + 1.
func registrationPort(g lbv1.WireGuardGateway) int32 { return g.EffectivePort() + 1 }

// health returns the gateways' health settings with defaults applied.
func health(w *lbv1.WireGuardBackend) wg.GatewayHealth {
	h := wg.GatewayHealth{ServerName: w.Health.ServerName, Rise: int(w.Health.Rise), Fall: int(w.Health.Fall)}
	if w.Health.Interval != nil {
		h.Interval.Duration = w.Health.Interval.Duration
	}
	if w.Health.Timeout != nil {
		h.Timeout.Duration = w.Health.Timeout.Duration
	}
	return h
}

// drainTimeout is spec.quiesce.drainPeriod: how long a quiesced member's open connections may
// last before the gateways close them (and the member's own drain on shutdown or rotation).
func drainTimeout(lb *lbv1.LoadBalancer) time.Duration { return lb.Spec.Quiesce.EffectiveDrainPeriod() }

// renderMember builds the member's configuration. nodeName stays empty: the member defaults it
// to the hostname, which must equal the kubelet's node name (the gateways report members by it).
func renderMember(lb *lbv1.LoadBalancer) wg.MemberConfig {
	w := lb.Spec.Backend.WireGuard
	c := wg.MemberConfig{
		TypeMeta:            metav1.TypeMeta{APIVersion: wg.APIVersion, Kind: wg.MemberKind},
		PrivateKeyFile:      path.Join(MemberKeyDir, "member.key"),
		TokenFile:           MemberTokenPath,
		TunnelPrefix:        w.Tunnel.EffectivePrefix(),
		PersistentKeepalive: agentv1.Duration{Duration: w.EffectivePersistentKeepalive()},
		Upstream:            net.JoinHostPort("127.0.0.1", strconv.Itoa(int(lb.Spec.EffectiveTargetPort()))),
		DrainTimeout:        agentv1.Duration{Duration: drainTimeout(lb)},
		Device:              w.Device,
	}
	if w.Device == lbv1.WireGuardDeviceTUN {
		// The gateways' connections go straight to the API server's port.
		c.TunnelPort = int(lb.Spec.EffectiveTargetPort())
	}
	for _, g := range w.Gateways {
		c.Gateways = append(c.Gateways, wg.MemberGateway{
			Endpoint:     net.JoinHostPort(g.Address, strconv.Itoa(int(g.EffectivePort()))),
			Registration: net.JoinHostPort(g.Address, strconv.Itoa(int(registrationPort(g)))),
			PublicKey:    g.PublicKey,
		})
	}
	return c
}

// renderGateway builds one gateway's configuration for this cluster. It listens on the
// endpoint's port on every address of its host; the admin listener takes TCP 127.0.0.1:<port>
// (the UDP port's number: unique per cluster on a host, as the UDP port must be).
func renderGateway(lb *lbv1.LoadBalancer, g lbv1.WireGuardGateway) wg.GatewayConfig {
	w := lb.Spec.Backend.WireGuard
	dir := GatewayDir(lb)
	port := strconv.Itoa(int(g.EffectivePort()))
	h := health(w)
	h.CAFile = path.Join(dir, CAKey)
	memberPort := 0 // the members' default, 6443 inside the tunnel
	if w.Device == lbv1.WireGuardDeviceTUN {
		memberPort = int(lb.Spec.EffectiveTargetPort())
	}
	return wg.GatewayConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: wg.APIVersion, Kind: wg.GatewayKind},
		Name:     g.Name,
		Listen:   ":" + strconv.Itoa(int(lb.Spec.EffectivePort())),
		WireGuard: wg.GatewayWireGuard{
			ListenPort:     int(g.EffectivePort()),
			PrivateKeyFile: path.Join(dir, "gateway.key"),
			TunnelPrefix:   w.Tunnel.EffectivePrefix(),
			Device:         w.Device,
		},
		MemberPort: memberPort,
		Registration: wg.GatewayRegistration{
			Listen:    ":" + strconv.Itoa(int(registrationPort(g))),
			TokenFile: path.Join(dir, TokenKey),
		},
		StateFile:    path.Join(dir, "gateway-state.json"),
		Health:       h,
		DrainTimeout: agentv1.Duration{Duration: drainTimeout(lb)},
		Admin:        wg.AdminConfig{Listen: net.JoinHostPort("127.0.0.1", port)},
	}
}

// checkMember and checkGateway run the data plane's own Default and Validate on a copy: the
// manager never hands out a file the member or gateway would refuse. The member's node name is
// known only on the node, so a stand-in takes its place.
func checkMember(c wg.MemberConfig) error {
	cp := c
	cp.Gateways = append([]wg.MemberGateway(nil), c.Gateways...)
	cp.NodeName = "rendered-by-manager"
	cp.Default()
	if err := cp.Validate(); err != nil {
		return fmt.Errorf("rendered member configuration is invalid: %w", err)
	}
	return nil
}

func checkGateway(c wg.GatewayConfig) error {
	cp := c
	cp.Default()
	if err := cp.Validate(); err != nil {
		return fmt.Errorf("rendered configuration of gateway %s is invalid: %w", c.Name, err)
	}
	return nil
}

// renderManifest is the member's static pod: no kubeconfig (it runs before kubeadm init), its
// key directory writable. On netstack no capabilities (userspace WireGuard: no TUN, no routes);
// on a TUN device NET_ADMIN and /dev/net/tun, nothing more.
func renderManifest(image, device string) ([]byte, error) {
	pod := vip.AgentPod{
		Component: lbv1.BackendWireGuard,
		Image:     image,
		Command:   []string{"caplb-agent", "wireguard", "--config", MemberConfigPath},
		Mounts: []vip.HostMount{
			{Name: "config", Path: vip.ConfigDir, Type: corev1.HostPathDirectory, ReadOnly: true},
			{Name: "state", Path: MemberKeyDir, Type: corev1.HostPathDirectoryOrCreate},
		},
	}
	if device == lbv1.WireGuardDeviceTUN {
		pod.Caps = []corev1.Capability{"NET_ADMIN"}
		pod.Mounts = append(pod.Mounts, vip.HostMount{Name: "tun", Path: "/dev/net/tun", Type: corev1.HostPathCharDev})
	}
	return pod.Render()
}
