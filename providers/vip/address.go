package vip

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch

// ClaimName is the name of the IPAddressClaim a LoadBalancer with addressFrom owns: the
// LoadBalancer's own name.
func ClaimName(lb *lbv1.LoadBalancer) string { return lb.Name }

// address is the outcome of resolving the VIP.
type address struct {
	// vip is the address, canonical, without prefix; empty while allocation waits.
	vip  string
	cond metav1.Condition
}

// resolveAddress finds the VIP: spec.endpoint.host, or the address the pool allocated to the
// LoadBalancer's IPAddressClaim (created here when missing). The pool's prefix is ignored: the
// agents install the VIP as a /32 (/128).
func (b *Backend) resolveAddress(ctx context.Context, lb *lbv1.LoadBalancer) (address, error) {
	cond := metav1.Condition{Type: lbv1.AddressAllocatedCondition}
	v := lb.Spec.Backend.VIP()
	if v.AddressFrom == nil {
		ip, err := netip.ParseAddr(lb.Spec.Endpoint.Host)
		if err != nil {
			return address{}, fmt.Errorf("spec.endpoint.host %q is not an IP address", lb.Spec.Endpoint.Host)
		}
		cond.Status, cond.Reason = metav1.ConditionTrue, lbv1.AddressAllocatedReason
		cond.Message = "the VIP is spec.endpoint.host " + ip.String()
		return address{vip: ip.Unmap().String(), cond: cond}, nil
	}
	ref := v.AddressFrom.PoolRef
	pool := fmt.Sprintf("%s %s (%s)", ref.Kind, ref.Name, ref.APIGroup)

	claim := &ipamv1.IPAddressClaim{}
	key := client.ObjectKey{Namespace: lb.Namespace, Name: ClaimName(lb)}
	err := b.opts.Client.Get(ctx, key, claim)
	switch {
	case apierrors.IsNotFound(err):
		claim = &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: clusterLabels(lb)},
			Spec: ipamv1.IPAddressClaimSpec{
				ClusterName: lb.Spec.ClusterName,
				PoolRef:     ipamv1.IPPoolReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name},
			},
		}
		if err := controllerutil.SetControllerReference(lb, claim, b.opts.Client.Scheme()); err != nil {
			return address{}, err
		}
		if err := b.opts.Client.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
			return address{}, fmt.Errorf("creating IPAddressClaim %s: %w", key, err)
		}
		cond.Status, cond.Reason = metav1.ConditionFalse, lbv1.WaitingForAddressReason
		cond.Message = fmt.Sprintf("created IPAddressClaim %s; waiting for pool %s to allocate an address", key.Name, pool)
		return address{cond: cond}, nil
	case err != nil:
		return address{}, fmt.Errorf("reading IPAddressClaim %s: %w", key, err)
	}
	if !metav1.IsControlledBy(claim, lb) {
		return address{}, fmt.Errorf("IPAddressClaim %s exists but is not controlled by this LoadBalancer; "+
			"delete it or rename the LoadBalancer", key)
	}
	if claim.Spec.PoolRef.Name != ref.Name || claim.Spec.PoolRef.Kind != ref.Kind || claim.Spec.PoolRef.APIGroup != ref.APIGroup {
		return address{}, fmt.Errorf("IPAddressClaim %s names pool %s %s, not spec.backend.%s.addressFrom.poolRef %s",
			key, claim.Spec.PoolRef.Kind, claim.Spec.PoolRef.Name, lb.Spec.Backend.Kind(), pool)
	}
	if claim.Status.AddressRef.Name == "" {
		cond.Status, cond.Reason = metav1.ConditionFalse, lbv1.WaitingForAddressReason
		cond.Message = fmt.Sprintf("IPAddressClaim %s waits for pool %s to allocate an address "+
			"(is its IPAM provider installed, the pool not exhausted, the Cluster not paused?)", key.Name, pool)
		if c := conditions.Get(claim, ipamv1.IPAddressClaimReadyCondition); c != nil && c.Status == metav1.ConditionFalse {
			if c.Reason == lbv1.PoolNotFoundReason {
				cond.Reason = lbv1.PoolNotFoundReason
			}
			cond.Message = fmt.Sprintf("IPAddressClaim %s waits for pool %s: %s: %s", key.Name, pool, c.Reason, c.Message)
		}
		return address{cond: cond}, nil
	}
	ipa := &ipamv1.IPAddress{}
	akey := client.ObjectKey{Namespace: lb.Namespace, Name: claim.Status.AddressRef.Name}
	if err := b.opts.Client.Get(ctx, akey, ipa); err != nil {
		if apierrors.IsNotFound(err) {
			cond.Status, cond.Reason = metav1.ConditionFalse, lbv1.WaitingForAddressReason
			cond.Message = fmt.Sprintf("IPAddressClaim %s points at IPAddress %s, which does not exist (yet)", key.Name, akey.Name)
			return address{cond: cond}, nil
		}
		return address{}, fmt.Errorf("reading IPAddress %s: %w", akey, err)
	}
	ip, err := netip.ParseAddr(ipa.Spec.Address)
	if err != nil {
		// Some providers write CIDR notation; the prefix is ignored either way.
		p, perr := netip.ParsePrefix(ipa.Spec.Address)
		if perr != nil {
			return address{}, fmt.Errorf("IPAddress %s has spec.address %q, not an IP address", akey, ipa.Spec.Address)
		}
		ip = p.Addr()
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, lbv1.AddressAllocatedReason
	cond.Message = fmt.Sprintf("pool %s allocated %s (IPAddress %s); installed as a single address", pool, ip, akey.Name)
	return address{vip: ip.Unmap().String(), cond: cond}, nil
}

// clusterLabels labels what the backend creates with the Cluster's name, as CAPI labels the
// objects of a Cluster.
func clusterLabels(lb *lbv1.LoadBalancer) map[string]string {
	if lb.Spec.ClusterName == "" {
		return nil
	}
	return map[string]string{"cluster.x-k8s.io/cluster-name": lb.Spec.ClusterName}
}
