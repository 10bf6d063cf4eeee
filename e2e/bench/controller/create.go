package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// population is what the benchmark creates: n Clusters, each with three control-plane
// Machines reported Ready (status written directly: no CAPI reconcilers run, so all the load is
// caplb's) and one static LoadBalancer in front of a real TCP listener.
type population struct {
	c         client.Client
	namespace string
	n         int
	workers   int
	endpoint  lbv1.APIEndpoint
}

func clusterName(i int) string    { return fmt.Sprintf("c-%04d", i) }
func lbName(i int) string         { return fmt.Sprintf("lb-%04d", i) }
func machineName(i, j int) string { return fmt.Sprintf("c-%04d-cp-%d", i, j) }

// create makes every object with w parallel workers and returns how long it took.
func (p *population) create(ctx context.Context, progress func(done int)) (time.Duration, error) {
	start := time.Now()
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
		done     atomic.Int64
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range p.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := p.createOne(ctx, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				if d := int(done.Add(1)); d%100 == 0 || d == p.n {
					progress(d)
				}
			}
		}()
	}
feed:
	for i := range p.n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	return time.Since(start), firstErr
}

func (p *population) createOne(ctx context.Context, i int) error {
	cl := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: clusterName(i)},
		// spec is required and a typed empty one is omitted.
		Spec: clusterv1.ClusterSpec{ClusterNetwork: clusterv1.ClusterNetwork{
			Pods: clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
		}},
	}
	if err := p.c.Create(ctx, cl); err != nil {
		return fmt.Errorf("creating Cluster %s: %w", cl.Name, err)
	}
	for j := range 3 {
		if err := p.createMachine(ctx, i, j); err != nil {
			return err
		}
	}
	// A zero drain period: the steady-state probe measures the controller's reaction to a
	// change, not a configured wait. Unstructured, so that the value is sent exactly as written.
	lb := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"clusterName": clusterName(i),
			"endpoint":    map[string]any{"host": p.endpoint.Host, "port": int64(p.endpoint.Port)},
			"backend":     map[string]any{"static": map[string]any{}},
			"quiesce":     map[string]any{"drainPeriod": "0s", "timeout": "1m"},
		},
	}}
	lb.SetGroupVersionKind(lbv1.GroupVersion.WithKind("LoadBalancer"))
	lb.SetNamespace(p.namespace)
	lb.SetName(lbName(i))
	if err := p.c.Create(ctx, lb); err != nil {
		return fmt.Errorf("creating LoadBalancer %s: %w", lb.GetName(), err)
	}
	return nil
}

func (p *population) createMachine(ctx context.Context, i, j int) error {
	name := machineName(i, j)
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.namespace, Name: name,
			Labels: map[string]string{
				clusterv1.ClusterNameLabel:         clusterName(i),
				clusterv1.MachineControlPlaneLabel: "",
			},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName(i),
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptrTo(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.caplb.test", Kind: "TestMachine", Name: name,
			},
		},
	}
	if err := p.c.Create(ctx, m); err != nil {
		return fmt.Errorf("creating Machine %s: %w", name, err)
	}
	// What CAPI's Machine reconciler would report for a healthy control-plane Machine.
	m.Status = clusterv1.MachineStatus{
		NodeRef: clusterv1.MachineNodeReference{Name: name},
		Addresses: []clusterv1.MachineAddress{{
			Type: clusterv1.MachineInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, 10+j),
		}},
		Conditions: []metav1.Condition{{
			Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: clusterv1.ReadyReason,
			LastTransitionTime: metav1.Now(),
		}},
	}
	if err := p.c.Status().Update(ctx, m); err != nil {
		return fmt.Errorf("reporting Machine %s Ready: %w", name, err)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
