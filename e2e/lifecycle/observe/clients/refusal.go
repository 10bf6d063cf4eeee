package clients

import (
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// etcdRefusal reports whether err is an API server's answer carrying its etcd's error: a Status
// with a server-error code whose message is etcd's ("etcdserver: request timed out", "etcdserver:
// leader changed", ...). Anything else — a reset, an EOF, a GOAWAY, a timeout of the client's
// own, a 503 from a shutting-down server, a 429 — is not: those are the endpoint's to prevent.
func etcdRefusal(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	if s.Code != http.StatusInternalServerError && s.Code != http.StatusGatewayTimeout {
		return false
	}
	return strings.HasPrefix(s.Message, "etcdserver: ")
}
