package vip

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	agentv1 "github.com/caplb/caplb/api/agent/v1alpha1"
	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete

// SecretSuffix ends the bootstrap Secret's name (lbv1.AgentSecretSuffix).
const SecretSuffix = lbv1.AgentSecretSuffix

// SecretName is the bootstrap Secret of lb, in lb's namespace: <cluster>-caplb-agent for a
// control plane, <loadbalancer>-caplb-agent for worker Machines or without spec.clusterName
// (lbv1.AgentSecretName).
func SecretName(lb *lbv1.LoadBalancer) string { return lbv1.AgentSecretName(lb) }

// newGossipKey returns 32 random bytes, base64: the agents' memberlist key (AES-256).
func newGossipKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generating the gossip key: %w", err)
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(len(k)))
	base64.StdEncoding.Encode(out, k)
	return out, nil
}

// loadSecret reads the bootstrap Secret and its authoritative membership, creating the Secret
// (gossip key, empty version-0 membership) when it does not exist. The other keys are filled by
// writeSecret.
func (b *Backend) loadSecret(ctx context.Context, lb *lbv1.LoadBalancer) (*corev1.Secret, agentv1.Membership, error) {
	key := client.ObjectKey{Namespace: lb.Namespace, Name: SecretName(lb)}
	sec := &corev1.Secret{}
	err := b.opts.Client.Get(ctx, key, sec)
	switch {
	case apierrors.IsNotFound(err):
		gk, err := newGossipKey()
		if err != nil {
			return nil, agentv1.Membership{}, err
		}
		m := agentv1.Membership{Version: 0, Members: []agentv1.MemberConfig{}}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: clusterLabels(lb)},
			Type:       corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				agentv1.SecretGossipKeyKey:  gk,
				agentv1.SecretMembershipKey: []byte(m.String()),
			},
		}
		if err := controllerutil.SetControllerReference(lb, sec, b.opts.Client.Scheme()); err != nil {
			return nil, agentv1.Membership{}, err
		}
		if err := b.opts.Client.Create(ctx, sec); err != nil {
			return nil, agentv1.Membership{}, fmt.Errorf("creating bootstrap Secret %s: %w", key, err)
		}
		return sec, m, nil
	case err != nil:
		return nil, agentv1.Membership{}, fmt.Errorf("reading bootstrap Secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(sec, lb) {
		return nil, agentv1.Membership{}, fmt.Errorf("Secret %s exists but is not controlled by this LoadBalancer; "+
			"it is the bootstrap Secret's name: delete or rename it", key)
	}
	if len(sec.Data[agentv1.SecretGossipKeyKey]) == 0 {
		// Only a person can have removed it: a new key splits running agents from new ones
		// until every node has it, so say so rather than regenerate silently.
		return nil, agentv1.Membership{}, fmt.Errorf("bootstrap Secret %s has no %s key; restore it, or delete the "+
			"Secret to have a new key generated (running agents keep the old key until their nodes get the new file)",
			key, agentv1.SecretGossipKeyKey)
	}
	raw := sec.Data[agentv1.SecretMembershipKey]
	if len(raw) == 0 {
		return sec, agentv1.Membership{Members: []agentv1.MemberConfig{}}, nil
	}
	m, err := agentv1.ParseMembership(string(raw))
	if err != nil {
		// Never start over from version 0: agents would ignore the older versions for ever.
		return nil, agentv1.Membership{}, fmt.Errorf("bootstrap Secret %s key %s: %w; fix or restore it",
			key, agentv1.SecretMembershipKey, err)
	}
	return sec, m, nil
}

// loadSecretIfAny reads the bootstrap Secret's membership without creating the Secret (release);
// a missing or foreign Secret is an error.
func (b *Backend) loadSecretIfAny(ctx context.Context, lb *lbv1.LoadBalancer) (*corev1.Secret, agentv1.Membership, error) {
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: lb.Namespace, Name: SecretName(lb)}
	if err := b.opts.Client.Get(ctx, key, sec); err != nil {
		return nil, agentv1.Membership{}, fmt.Errorf("reading bootstrap Secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(sec, lb) {
		return nil, agentv1.Membership{}, fmt.Errorf("secret %s is not controlled by this LoadBalancer", key)
	}
	m, err := agentv1.ParseMembership(string(sec.Data[agentv1.SecretMembershipKey]))
	if err != nil {
		return nil, agentv1.Membership{}, fmt.Errorf("bootstrap Secret %s key %s: %w", key, agentv1.SecretMembershipKey, err)
	}
	return sec, m, nil
}

// bgpPasswords copies each peer's TCP-MD5 password from the Secret it names, by peer index.
func (b *Backend) bgpPasswords(ctx context.Context, lb *lbv1.LoadBalancer) (map[int][]byte, error) {
	out := map[int][]byte{}
	if lb.Spec.Backend.BGP == nil {
		return out, nil
	}
	for i, p := range lb.Spec.Backend.BGP.Peers {
		ref := p.PasswordSecretRef
		if ref == nil {
			continue
		}
		s := &corev1.Secret{}
		if err := b.opts.Client.Get(ctx, client.ObjectKey{Namespace: lb.Namespace, Name: ref.Name}, s); err != nil {
			return nil, fmt.Errorf("spec.backend.bgp.peers[%d].passwordSecretRef: reading Secret %s: %w", i, ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok || len(bytes.TrimSpace(v)) == 0 {
			return nil, fmt.Errorf("spec.backend.bgp.peers[%d].passwordSecretRef: Secret %s has no key %q (or it is empty)", i, ref.Name, ref.Key)
		}
		out[i] = v
	}
	return out, nil
}

// writeSecret renders the agent's files for membership m into sec and updates it when anything
// changed. The update carries sec's resourceVersion: a membership is issued at most once per
// version, even if two writers raced.
func (b *Backend) writeSecret(ctx context.Context, lb *lbv1.LoadBalancer, sec *corev1.Secret, vip string, m agentv1.Membership) error {
	pw, err := b.bgpPasswords(ctx, lb)
	if err != nil {
		return err
	}
	passwords := map[int]bool{}
	for i := range pw {
		passwords[i] = true
	}
	cfg, err := RenderAgentConfig(lb, vip, m, passwords)
	if err != nil {
		return err
	}
	cfgYAML, err := marshalConfig(cfg)
	if err != nil {
		return err
	}
	image := lb.Spec.Backend.VIP().Agent.Image
	if image == "" {
		image = b.opts.AgentImage
	}
	manifest, err := RenderAgentManifest(lb, image)
	if err != nil {
		return err
	}
	data := map[string][]byte{
		agentv1.SecretGossipKeyKey:  sec.Data[agentv1.SecretGossipKeyKey],
		agentv1.SecretConfigKey:     cfgYAML,
		agentv1.SecretManifestKey:   manifest,
		agentv1.SecretMembershipKey: []byte(m.String()),
	}
	for i, v := range pw {
		data[PasswordKey(i)] = v
	}
	if maps.EqualFunc(data, sec.Data, bytes.Equal) {
		return nil
	}
	sec.Data = data
	if err := b.opts.Client.Update(ctx, sec); err != nil {
		return fmt.Errorf("updating bootstrap Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	return nil
}
