package controllers

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	lbv1 "github.com/caplb/caplb/api/v1alpha1"
)

// startsTakeOver reports whether this create or update sets spec.takeOverEndpointFrom anew (a
// create with it, or an update that adds it): only then is the old LoadBalancer read. A stored
// move is the reconciler's to check, step by step; refusing its updates here would block the
// manager's own patches. So is a move the field is set again for after the old LoadBalancer
// let go (status.endpointMove past ReleaseOld names it): the old one no longer publishes, by
// design, and the move must be able to finish (docs/endpoint-move.md, Rollback).
func startsTakeOver(op admissionv1.Operation, lb, old *lbv1.LoadBalancer) bool {
	if lb.Spec.TakeOverEndpointFrom == nil || !lb.DeletionTimestamp.IsZero() {
		return false
	}
	if op == admissionv1.Create || old == nil {
		return true
	}
	if old.Spec.TakeOverEndpointFrom != nil {
		return false
	}
	if st := old.Status.EndpointMove; st != nil && st.From == lb.Spec.TakeOverEndpointFrom.Name {
		switch st.Step {
		case lbv1.MoveStepReleaseOld, lbv1.MoveStepClusterEndpoint, lbv1.MoveStepPublish:
			return false
		}
	}
	return true
}

// admitTakeOver applies ValidateTakeOver to a LoadBalancer that starts a move, reading the
// namespace's LoadBalancers within the same live-read bound as the publisher check.
func (v *PublisherValidator) admitTakeOver(ctx context.Context, req admission.Request, lb *lbv1.LoadBalancer) admission.Response {
	list, busy, err := v.listLive(ctx, req.Namespace)
	if busy {
		return tooManyReviews(v.maxLiveReads())
	}
	if err != nil {
		return admission.Errored(http.StatusInternalServerError,
			fmt.Errorf("listing the LoadBalancers of namespace %s: %w", req.Namespace, err))
	}
	var old *lbv1.LoadBalancer
	for i := range list {
		if list[i].Name == lb.Spec.TakeOverEndpointFrom.Name {
			old = &list[i]
		}
	}
	if errs := append(validateTakeOverSpec(lb), ValidateTakeOver(lb, old)...); len(errs) > 0 {
		status := apierrors.NewInvalid(lbv1.GroupVersion.WithKind("LoadBalancer").GroupKind(), req.Name, errs).Status()
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
	}
	return admission.Allowed("")
}
