package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// ipamFinalizer is how the lab's IPAM holds a claim until its address is released.
const ipamFinalizer = "lifecycle.caplb.test/release-address"

// ipam plays the in-cluster IPAM provider for one pool (the provider is not among the modules
// the lab builds): it allocates the next free address of the pool to each IPAddressClaim that
// names the pool, with the pool's prefix and gateway, and releases it when the claim goes.
type ipam struct {
	client   client.Client
	ns       string
	poolKind string
	poolName string
	first    netip.Addr
	prefix   int32
	gateway  string
}

// run serves claims until ctx ends.
func (p *ipam) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		_ = p.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *ipam) step(ctx context.Context) error {
	claims := &ipamv1.IPAddressClaimList{}
	if err := p.client.List(ctx, claims, client.InNamespace(p.ns)); err != nil {
		return err
	}
	addrs := &ipamv1.IPAddressList{}
	if err := p.client.List(ctx, addrs, client.InNamespace(p.ns)); err != nil {
		return err
	}
	used := map[string]bool{}
	for _, a := range addrs.Items {
		used[a.Spec.Address] = true
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Spec.PoolRef.Kind != p.poolKind || c.Spec.PoolRef.Name != p.poolName {
			continue
		}
		if !c.DeletionTimestamp.IsZero() {
			if err := p.client.Delete(ctx, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: c.Name}}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if controllerutil.RemoveFinalizer(c, ipamFinalizer) {
				if err := p.client.Update(ctx, c); err != nil {
					return err
				}
			}
			continue
		}
		if c.Status.AddressRef.Name != "" {
			continue
		}
		if controllerutil.AddFinalizer(c, ipamFinalizer) {
			if err := p.client.Update(ctx, c); err != nil {
				return err
			}
		}
		addr := p.first
		for used[addr.String()] {
			addr = addr.Next()
		}
		used[addr.String()] = true
		ip := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: c.Name},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: c.Name},
				PoolRef:  c.Spec.PoolRef,
				Address:  addr.String(), Prefix: &p.prefix, Gateway: p.gateway,
			},
		}
		if err := p.client.Create(ctx, ip); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("allocating for claim %s: %w", c.Name, err)
		}
		c.Status.AddressRef = ipamv1.IPAddressReference{Name: ip.Name}
		if err := p.client.Status().Update(ctx, c); err != nil {
			return err
		}
	}
	return nil
}
