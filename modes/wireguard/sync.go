package wireguard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultSyncInterval is how often a gateway reads its Secret and writes its report.
const DefaultSyncInterval = 5 * time.Second

// SecretSync runs a gateway from the management cluster: it copies the gateway's configuration,
// the join token and the Cluster's CA from the gateways' Secret into Dir (mode 0600), applies the
// Secret's quiesced nodes, and writes the gateway's report to the ConfigMap
// <secret>-<gateway>. When the management cluster is unreachable (or being moved) the gateway
// keeps serving from the files in Dir: nothing it needs lives only in the management cluster.
type SecretSync struct {
	Client    ManagementAPI
	Namespace string
	// Secret is the gateways' Secret, <clusterName>-caplb-gateway.
	Secret string
	// Gateway is this gateway's name in spec.backend.wireguard.gateways.
	Gateway string
	// Dir holds this cluster's files: gateway.yaml, join-token, ca.crt, and (the paths in the
	// configuration are rewritten to it) the gateway's key and state file.
	Dir string
	// Interval between two reads of the Secret and two reports. Default DefaultSyncInterval.
	Interval time.Duration
	Log      logr.Logger

	reachable *bool             // last outcome, to log transitions only
	labels    map[string]string // the Secret's, copied to the report (cluster-name)
}

func (s *SecretSync) interval() time.Duration {
	if s.Interval > 0 {
		return s.Interval
	}
	return DefaultSyncInterval
}

// ConfigFile is the cached configuration.
func (s *SecretSync) ConfigFile() string { return filepath.Join(s.Dir, "gateway.yaml") }

// ReportName is the ConfigMap this gateway reports to.
func (s *SecretSync) ReportName() string { return s.Secret + "-" + s.Gateway }

// fetch reads the Secret and writes this gateway's files when they changed. It returns the
// quiesced nodes and whether a file the running gateway loaded at start changed.
func (s *SecretSync) fetch(ctx context.Context) (quiesced []string, changed bool, err error) {
	sec, err := s.Client.GetSecret(ctx, s.Namespace, s.Secret)
	if err != nil {
		return nil, false, fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, s.Secret, err)
	}
	s.labels = sec.Labels
	cfg, ok := sec.Data[wgapi.SecretGatewayKey(s.Gateway)]
	if !ok {
		return nil, false, fmt.Errorf("Secret %s/%s has no key %s: is %q listed in the LoadBalancer's spec.backend.wireguard.gateways?",
			s.Namespace, s.Secret, wgapi.SecretGatewayKey(s.Gateway), s.Gateway)
	}
	if raw := sec.Data[wgapi.SecretQuiescedKey]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &quiesced); err != nil {
			return nil, false, fmt.Errorf("Secret %s/%s key %s: %w", s.Namespace, s.Secret, wgapi.SecretQuiescedKey, err)
		}
	}
	for name, data := range map[string][]byte{"gateway.yaml": cfg, wgapi.SecretTokenKey: sec.Data[wgapi.SecretTokenKey], wgapi.SecretCAKey: sec.Data[wgapi.SecretCAKey]} {
		if len(data) == 0 {
			continue
		}
		p := filepath.Join(s.Dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
			continue
		}
		if err := writePrivate(p, data); err != nil {
			return nil, false, err
		}
		changed = true
	}
	return quiesced, changed, nil
}

// note logs when the management cluster becomes reachable or unreachable.
func (s *SecretSync) note(err error) {
	ok := err == nil
	if s.reachable != nil && *s.reachable == ok {
		return
	}
	s.reachable = &ok
	if ok {
		s.Log.Info("management cluster reachable; configuration in sync", "secret", s.Namespace+"/"+s.Secret)
	} else {
		s.Log.Error(err, "management cluster unreachable; serving from the last configuration", "dir", s.Dir)
	}
}

// Load returns the gateway configuration: fetched from the Secret, else the cached copy. It
// waits (retrying every interval) while neither exists or the Cluster's CA is not there yet.
func (s *SecretSync) Load(ctx context.Context) (*wgapi.GatewayConfig, error) {
	for {
		_, _, err := s.fetch(ctx)
		s.note(err)
		cfg, lerr := s.loadCached()
		if lerr == nil {
			return cfg, nil
		}
		s.Log.Info("waiting for this gateway's configuration", "reason", errors.Join(err, lerr).Error())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.interval()):
		}
	}
}

// loadCached reads the cached configuration, with its files pointed into Dir.
func (s *SecretSync) loadCached() (*wgapi.GatewayConfig, error) {
	b, err := os.ReadFile(s.ConfigFile())
	if err != nil {
		return nil, fmt.Errorf("no cached configuration: %w", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, wgapi.SecretCAKey)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s yet: CAPI creates the Cluster's CA once the endpoint is published", wgapi.SecretCAKey)
	}
	c, err := wgapi.DecodeGateway(b)
	if err != nil {
		return nil, fmt.Errorf("cached configuration %s: %w", s.ConfigFile(), err)
	}
	c.WireGuard.PrivateKeyFile = filepath.Join(s.Dir, "gateway.key")
	c.StateFile = filepath.Join(s.Dir, "gateway-state.json")
	c.Registration.TokenFile = filepath.Join(s.Dir, wgapi.SecretTokenKey)
	c.Health.CAFile = filepath.Join(s.Dir, wgapi.SecretCAKey)
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("cached configuration %s: %w", s.ConfigFile(), err)
	}
	return c, nil
}

// Run keeps g in step with the Secret and reports until ctx ends.
func (s *SecretSync) Run(ctx context.Context, g *Gateway) {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		s.Step(ctx, g)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step reads the Secret once (applying its quiesced nodes) and writes one report.
func (s *SecretSync) Step(ctx context.Context, g *Gateway) {
	quiesced, changed, err := s.fetch(ctx)
	s.note(err)
	if err != nil {
		return
	}
	if changed {
		// The listeners, token and CA are loaded at start; a restart applies the change.
		s.Log.Info("configuration, join token or CA changed in the Secret; restart the gateway to apply it", "dir", s.Dir)
	}
	g.pool.mu.Lock()
	var on, off []string
	for _, n := range quiesced {
		if !g.pool.quiescedNodes[n] {
			on = append(on, n)
		}
	}
	for n := range g.pool.quiescedNodes {
		if !slices.Contains(quiesced, n) {
			off = append(off, n)
		}
	}
	g.pool.mu.Unlock()
	for _, n := range on {
		g.Quiesce(n, true)
	}
	for _, n := range off {
		g.Quiesce(n, false)
	}
	if err := s.report(ctx, g); err != nil {
		s.Log.Error(err, "writing the gateway report", "configmap", s.Namespace+"/"+s.ReportName())
	}
}

// report writes the gateway's report ConfigMap.
func (s *SecretSync) report(ctx context.Context, g *Gateway) error {
	b, err := json.Marshal(g.Report(time.Now()))
	if err != nil {
		return err
	}
	cm, err := s.Client.GetConfigMap(ctx, s.Namespace, s.ReportName())
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.ReportName(), Labels: s.labels},
			Data: map[string]string{wgapi.ReportKey: string(b)}}
		return s.Client.CreateConfigMap(ctx, cm)
	}
	if err != nil {
		return err
	}
	cm.Data = map[string]string{wgapi.ReportKey: string(b)}
	return s.Client.UpdateConfigMap(ctx, cm)
}
