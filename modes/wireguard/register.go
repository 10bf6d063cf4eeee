package wireguard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"
)

// Registration: a member proves it holds the cluster's join token, the gateway proves the same in
// its answer. Both messages carry an HMAC-SHA256 keyed with the token, so the token never crosses
// the wire and no TLS certificate is needed on the gateway: public keys and tunnel addresses are
// not secret, but they must be authentic (a forged gateway key would be a man in the middle; a
// forged member key would receive API traffic). A replayed request only re-registers a public key
// whose private half the replayer does not have.

// maxClockSkew bounds how old a signed request may be.
const maxClockSkew = 5 * time.Minute

// RegisterRequest is POST /v1/register and /v1/deregister.
type RegisterRequest struct {
	Node      string `json:"node"`
	PublicKey string `json:"publicKey"`
	// Time is the member's clock (Unix seconds), bound into the MAC.
	Time int64  `json:"time"`
	MAC  string `json:"mac"`
}

// RegisterResponse is the gateway's signed answer.
type RegisterResponse struct {
	GatewayName      string `json:"gatewayName"`
	GatewayPublicKey string `json:"gatewayPublicKey"`
	GatewayAddress   string `json:"gatewayAddress"`
	MemberAddress    string `json:"memberAddress"`
	TunnelPrefix     string `json:"tunnelPrefix"`
	MemberPort       int    `json:"memberPort"`
	MAC              string `json:"mac"`
}

func mac(token []byte, fields ...string) string {
	h := hmac.New(sha256.New, token)
	for _, f := range fields {
		// Length-prefixed, so that no two field lists hash alike.
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func (r *RegisterRequest) fields(op string) []string {
	return []string{"caplb-wg-" + op, r.Node, r.PublicKey, strconv.FormatInt(r.Time, 10)}
}

// Sign fills in the MAC for op ("register" or "deregister").
func (r *RegisterRequest) Sign(op string, token []byte) { r.MAC = mac(token, r.fields(op)...) }

// Verify checks the MAC and the clock skew.
func (r *RegisterRequest) Verify(op string, token []byte, now time.Time) error {
	if !hmac.Equal([]byte(r.MAC), []byte(mac(token, r.fields(op)...))) {
		return errors.New("bad MAC: the member's join token differs from this gateway's")
	}
	if d := now.Sub(time.Unix(r.Time, 0)); d > maxClockSkew || d < -maxClockSkew {
		return fmt.Errorf("request time is %v off this gateway's clock (more than %v)", d.Round(time.Second), maxClockSkew)
	}
	return nil
}

func (r *RegisterResponse) fields(req *RegisterRequest) []string {
	return []string{"caplb-wg-registered", req.PublicKey, strconv.FormatInt(req.Time, 10), r.GatewayName,
		r.GatewayPublicKey, r.GatewayAddress, r.MemberAddress, r.TunnelPrefix, strconv.Itoa(r.MemberPort)}
}

// Sign binds the answer to the request it answers.
func (r *RegisterResponse) Sign(req *RegisterRequest, token []byte) {
	r.MAC = mac(token, r.fields(req)...)
}

// Verify checks the answer's MAC against the request it answers.
func (r *RegisterResponse) Verify(req *RegisterRequest, token []byte) error {
	if !hmac.Equal([]byte(r.MAC), []byte(mac(token, r.fields(req)...))) {
		return errors.New("gateway answer has a bad MAC: wrong gateway, or its join token differs")
	}
	return nil
}

// Registrar is what the registration endpoint asks of the gateway.
type Registrar interface {
	// Register adds (or refreshes) a member; it returns the answer to sign.
	Register(node string, pub Key) (RegisterResponse, error)
	// Deregister quiesces a member's key: no new connections, open ones drained, then removed.
	Deregister(node string, pub Key) error
}

// ErrConflict is returned by Register when another key already holds the derived address.
var ErrConflict = errors.New("tunnel address already taken by another key")

// RegistrationHandler serves POST /v1/register and POST /v1/deregister.
func RegistrationHandler(token []byte, reg Registrar, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	read := func(w http.ResponseWriter, r *http.Request, op string) (*RegisterRequest, Key, bool) {
		var req RegisterRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return nil, Key{}, false
		}
		if err := req.Verify(op, token, now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return nil, Key{}, false
		}
		pub, err := wgapi.ParseKey(req.PublicKey)
		if err != nil || req.Node == "" || len(req.Node) > 253 {
			http.Error(w, "bad request: publicKey or node", http.StatusBadRequest)
			return nil, Key{}, false
		}
		return &req, pub, true
	}
	mux.HandleFunc("POST /v1/register", func(w http.ResponseWriter, r *http.Request) {
		req, pub, ok := read(w, r, "register")
		if !ok {
			return
		}
		resp, err := reg.Register(req.Node, pub)
		if errors.Is(err, ErrConflict) {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.Sign(req, token)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
	mux.HandleFunc("POST /v1/deregister", func(w http.ResponseWriter, r *http.Request) {
		req, pub, ok := read(w, r, "deregister")
		if !ok {
			return
		}
		if err := reg.Deregister(req.Node, pub); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Register asks the gateway at addr (host:port) to admit pub, and verifies the answer: its MAC,
// that the member address is the one derived from pub in prefix, and the pinned gateway key if
// one is given.
func Register(ctx context.Context, client *http.Client, addr string, token []byte, node string, pub Key,
	prefix netip.Prefix, pinned string) (*RegisterResponse, error) {
	req := &RegisterRequest{Node: node, PublicKey: pub.String(), Time: time.Now().Unix()}
	req.Sign("register", token)
	var resp RegisterResponse
	if err := post(ctx, client, addr, "/v1/register", req, &resp); err != nil {
		return nil, err
	}
	if err := resp.Verify(req, token); err != nil {
		return nil, err
	}
	if resp.TunnelPrefix != prefix.String() {
		return nil, fmt.Errorf("gateway %s uses tunnel prefix %s, this member %s; set tunnelPrefix to the gateways'", resp.GatewayName, resp.TunnelPrefix, prefix)
	}
	if want := TunnelAddress(prefix, pub).String(); resp.MemberAddress != want {
		return nil, fmt.Errorf("gateway %s assigned %s, want %s (derived from the key)", resp.GatewayName, resp.MemberAddress, want)
	}
	gk, err := wgapi.ParseKey(resp.GatewayPublicKey)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: public key: %w", resp.GatewayName, err)
	}
	if want := TunnelAddress(prefix, gk).String(); resp.GatewayAddress != want {
		return nil, fmt.Errorf("gateway %s: address %s, want %s (derived from its key)", resp.GatewayName, resp.GatewayAddress, want)
	}
	if pinned != "" && strings.TrimSpace(pinned) != resp.GatewayPublicKey {
		return nil, fmt.Errorf("gateway %s answered with key %s, pinned %s", resp.GatewayName, resp.GatewayPublicKey, pinned)
	}
	return &resp, nil
}

// Deregister asks the gateway at addr to quiesce and then forget pub.
func Deregister(ctx context.Context, client *http.Client, addr string, token []byte, node string, pub Key) error {
	req := &RegisterRequest{Node: node, PublicKey: pub.String(), Time: time.Now().Unix()}
	req.Sign("deregister", token)
	return post(ctx, client, addr, "/v1/deregister", req, nil)
}

func post(ctx context.Context, client *http.Client, addr, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(r)
	if err != nil {
		return fmt.Errorf("%s %s: %w", path, addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", path, addr, resp.Status, strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: answer: %w", path, addr, err)
	}
	return nil
}
