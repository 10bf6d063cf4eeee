package v1alpha1

import (
	"fmt"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Keys of the gateways' Secret (<clusterName>-caplb-gateway) the manager renders for a wireguard
// LoadBalancer (providers/wireguard), read by `caplb gateway --from-secret`.
const (
	SecretTokenKey    = "join-token"
	SecretCAKey       = "ca.crt"
	SecretQuiescedKey = "quiesced.json"
)

// SecretGatewayKey is gateway name's configuration in the gateways' Secret.
func SecretGatewayKey(name string) string { return "gateway-" + name + ".yaml" }

// ParseKey reads a base64 WireGuard (Curve25519) key as `wg genkey` / `wg pubkey` print it.
func ParseKey(s string) (wgtypes.Key, error) {
	k, err := wgtypes.ParseKey(strings.TrimSpace(s))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("not a WireGuard key (44 characters of base64, as `wg pubkey` prints): %w", err)
	}
	return k, nil
}
