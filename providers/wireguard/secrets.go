package wireguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
	"github.com/caplb/caplb/providers/vip"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete

// Names of the Secrets the backend keeps, in the LoadBalancer's namespace, all controlled by the
// LoadBalancer (so clusterctl move carries them and deleting it removes them).
const (
	// TokenSecretSuffix: <clusterName>-caplb-wireguard-token holds the join token (key
	// join-token), the source of truth the other two copy. Delete it to rotate the token.
	TokenSecretSuffix = "-caplb-wireguard-token"
	// GatewaySecretSuffix: <clusterName>-caplb-gateway holds what the gateways need.
	GatewaySecretSuffix = "-caplb-gateway"
)

// TokenSecretName, BootstrapSecretName and GatewaySecretName name lb's Secrets.
func TokenSecretName(lb *lbv1.LoadBalancer) string { return lb.Spec.ClusterName + TokenSecretSuffix }

// BootstrapSecretName is the members' bootstrap Secret, the arp and bgp backends' name.
func BootstrapSecretName(lb *lbv1.LoadBalancer) string { return vip.SecretName(lb) }

// GatewaySecretName is the gateways' Secret.
func GatewaySecretName(lb *lbv1.LoadBalancer) string {
	return lb.Spec.ClusterName + GatewaySecretSuffix
}

// newToken returns 32 random bytes, base64: the join token (HMAC key of registration).
func newToken() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generating the join token: %w", err)
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(len(k)))
	base64.StdEncoding.Encode(out, k)
	return out, nil
}

func labels(lb *lbv1.LoadBalancer) map[string]string {
	return map[string]string{clusterv1.ClusterNameLabel: lb.Spec.ClusterName}
}

// token reads the join token, generating the Secret when it does not exist.
func (b *Backend) token(ctx context.Context, lb *lbv1.LoadBalancer) ([]byte, error) {
	key := client.ObjectKey{Namespace: lb.Namespace, Name: TokenSecretName(lb)}
	sec := &corev1.Secret{}
	err := b.opts.Client.Get(ctx, key, sec)
	switch {
	case apierrors.IsNotFound(err):
		tok, err := newToken()
		if err != nil {
			return nil, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: labels(lb)},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{TokenKey: tok},
		}
		if err := controllerutil.SetControllerReference(lb, sec, b.opts.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := b.opts.Client.Create(ctx, sec); err != nil {
			return nil, fmt.Errorf("creating join token Secret %s: %w", key, err)
		}
		return tok, nil
	case err != nil:
		return nil, fmt.Errorf("reading join token Secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(sec, lb) {
		return nil, fmt.Errorf("Secret %s exists but is not controlled by this LoadBalancer; it is the join token "+
			"Secret's name: delete or rename it", key)
	}
	tok := bytes.TrimSpace(sec.Data[TokenKey])
	if len(tok) < 16 {
		// Never regenerate silently: running gateways and members would stop trusting each other.
		return nil, fmt.Errorf("join token Secret %s: key %s is missing or shorter than 16 characters; "+
			"restore it, or delete the Secret to have a new token generated (then restart the gateways and members with it)",
			key, TokenKey)
	}
	return tok, nil
}

// clusterCA returns the Cluster's CA certificate (<clusterName>-ca, tls.crt), nil while CAPI has
// not created it yet (the control plane provider does, once the endpoint is published).
func (b *Backend) clusterCA(ctx context.Context, lb *lbv1.LoadBalancer) ([]byte, error) {
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: lb.Namespace, Name: lb.Spec.ClusterName + "-ca"}
	if err := b.opts.Client.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the Cluster's CA Secret %s: %w", key, err)
	}
	return sec.Data[corev1.TLSCertKey], nil
}

// applySecret creates the Secret name with data, or updates it when its data differ. An
// existing Secret that lb does not control is an error naming the fix. The data are never
// logged.
func (b *Backend) applySecret(ctx context.Context, lb *lbv1.LoadBalancer, name string, data map[string][]byte) error {
	key := client.ObjectKey{Namespace: lb.Namespace, Name: name}
	sec := &corev1.Secret{}
	err := b.opts.Client.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: labels(lb)},
			Type:       corev1.SecretTypeOpaque,
			Data:       data,
		}
		if err := controllerutil.SetControllerReference(lb, sec, b.opts.Client.Scheme()); err != nil {
			return err
		}
		if err := b.opts.Client.Create(ctx, sec); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(sec, lb) {
		return fmt.Errorf("Secret %s exists but is not controlled by this LoadBalancer; caplb renders it: delete or rename it", key)
	}
	if maps.EqualFunc(data, sec.Data, bytes.Equal) {
		return nil
	}
	sec.Data = data
	if err := b.opts.Client.Update(ctx, sec); err != nil {
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return nil
}

// writeBootstrap renders the members' bootstrap Secret.
func (b *Backend) writeBootstrap(ctx context.Context, lb *lbv1.LoadBalancer, token []byte) error {
	cfg := renderMember(lb)
	if err := checkMember(cfg); err != nil {
		return err
	}
	cfgYAML, err := vip.MarshalConfig(cfg)
	if err != nil {
		return err
	}
	image := lb.Spec.Backend.WireGuard.Agent.Image
	if image == "" {
		image = b.opts.AgentImage
	}
	manifest, err := renderManifest(image, lb.Spec.Backend.WireGuard.Device)
	if err != nil {
		return err
	}
	return b.applySecret(ctx, lb, BootstrapSecretName(lb), map[string][]byte{
		MemberConfigKey:           cfgYAML,
		TokenKey:                  token,
		agentv1.SecretManifestKey: manifest,
	})
}

// writeGateways renders the gateways' Secret: one configuration per gateway, the join token,
// the CA once it exists, and the nodes to keep out of rotation.
func (b *Backend) writeGateways(ctx context.Context, lb *lbv1.LoadBalancer, token, ca []byte, quiesced []string) error {
	data := map[string][]byte{TokenKey: token}
	for _, g := range lb.Spec.Backend.WireGuard.Gateways {
		cfg := renderGateway(lb, g)
		if err := checkGateway(cfg); err != nil {
			return err
		}
		y, err := vip.MarshalConfig(cfg)
		if err != nil {
			return err
		}
		data[GatewayConfigKey(g.Name)] = y
	}
	if len(ca) > 0 {
		data[CAKey] = ca
	}
	q := slices.Clone(quiesced)
	if q == nil {
		q = []string{}
	}
	slices.Sort(q)
	q = slices.Compact(q)
	qj, err := json.Marshal(q)
	if err != nil {
		return err
	}
	data[QuiescedKey] = qj
	return b.applySecret(ctx, lb, GatewaySecretName(lb), data)
}

// setQuiesced adds node to (on) or removes it from the gateways' quiesced list, changing
// nothing else in their Secret (Ensure renders the rest).
func (b *Backend) setQuiesced(ctx context.Context, lb *lbv1.LoadBalancer, node string, on bool) error {
	key := client.ObjectKey{Namespace: lb.Namespace, Name: GatewaySecretName(lb)}
	sec := &corev1.Secret{}
	if err := b.opts.Client.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) && !on {
			return nil
		}
		return fmt.Errorf("reading the gateways' Secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(sec, lb) {
		return fmt.Errorf("Secret %s exists but is not controlled by this LoadBalancer; caplb renders it: delete or rename it", key)
	}
	var q []string
	if raw := sec.Data[QuiescedKey]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &q); err != nil {
			return fmt.Errorf("the gateways' Secret %s key %s: %w", key, QuiescedKey, err)
		}
	}
	has := slices.Contains(q, node)
	if has == on {
		return nil
	}
	if on {
		q = append(q, node)
	} else {
		q = slices.DeleteFunc(q, func(s string) bool { return s == node })
	}
	slices.Sort(q)
	if q == nil {
		q = []string{}
	}
	raw, err := json.Marshal(q)
	if err != nil {
		return err
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	sec.Data[QuiescedKey] = raw
	if err := b.opts.Client.Update(ctx, sec); err != nil {
		return fmt.Errorf("updating the gateways' Secret %s: %w", key, err)
	}
	return nil
}
