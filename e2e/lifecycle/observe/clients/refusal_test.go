package clients

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func statusErr(code int32, reason metav1.StatusReason, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}
}

func TestEtcdRefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"etcd's proposal timeout, wrapped by the writer",
			fmt.Errorf("write k=1: %w", statusErr(500, metav1.StatusReasonInternalError, "etcdserver: request timed out")), true},
		{"etcd's leader change", statusErr(500, metav1.StatusReasonInternalError, "etcdserver: leader changed"), true},
		{"etcd's timeout as a gateway timeout", statusErr(504, metav1.StatusReasonTimeout, "etcdserver: request timed out, possibly due to previous leader failure"), true},
		{"a shutting-down API server's 503", statusErr(503, metav1.StatusReasonServiceUnavailable, "apiserver is shutting down"), false},
		{"a 429 naming etcd is still the server's throttle", statusErr(429, metav1.StatusReasonTooManyRequests, "etcdserver: too many requests"), false},
		{"another internal error", statusErr(500, metav1.StatusReasonInternalError, "Internal error occurred: resource quota evaluation timed out"), false},
		{"a reset", fmt.Errorf("write k=1: %w", syscall.ECONNRESET), false},
		{"an EOF", fmt.Errorf("Put \"https://vip\": %w", io.ErrUnexpectedEOF), false},
		{"a plain error naming etcd (no Status)", errors.New("etcdserver: request timed out"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(etcdRefusal(tc.err)).To(Equal(tc.want))
		})
	}
}
