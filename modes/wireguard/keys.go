package wireguard

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	wgapi "github.com/caplb/caplb/api/wireguard/v1alpha1"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Key is a WireGuard (Curve25519) key.
type Key = wgtypes.Key

// hexKey is the form the UAPI (device.IpcSet) wants.
func hexKey(k Key) string { return hex.EncodeToString(k[:]) }

// LoadOrCreateKey reads the private key at path, or generates one and writes it with mode 0600
// (the directory 0700) when the file does not exist. A key file readable by group or others is
// refused: the private key is the member's identity at every gateway.
func LoadOrCreateKey(path string) (Key, error) {
	k, err := LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	k, err = wgtypes.GeneratePrivateKey()
	if err != nil {
		return Key{}, fmt.Errorf("generate key: %w", err)
	}
	if err := WriteKey(path, k); err != nil {
		return Key{}, err
	}
	return k, nil
}

// LoadKey reads a private key file, refusing one with loose permissions.
func LoadKey(path string) (Key, error) {
	if err := checkPrivate(path); err != nil {
		return Key{}, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("read key: %w", err)
	}
	k, err := wgapi.ParseKey(string(b))
	if err != nil {
		return Key{}, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}

// WriteKey writes k atomically with mode 0600.
func WriteKey(path string, k Key) error {
	return writePrivate(path, []byte(k.String()+"\n"))
}

// writePrivate writes data to path atomically with mode 0600, creating the directory (0700).
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checkPrivate refuses a secret file that group or others may read.
func checkPrivate(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("secret file %s has mode %v; it must not be readable by group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	return nil
}

// LoadToken reads a join token file (mode 0600, at least 16 characters).
func LoadToken(path string) ([]byte, error) {
	if err := checkPrivate(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read join token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return nil, fmt.Errorf("join token in %s is %d characters; use at least 16 random ones (e.g. head -c 32 /dev/urandom | base64)", path, len(t))
	}
	return []byte(t), nil
}

// TunnelAddress derives the tunnel address of a public key: the prefix with its host bits taken
// from SHA-256 of the key. Every gateway and member computes the same address for a key, so no
// allocator (and no state in the management cluster) is needed. In IPv4 the all-zeros and
// all-ones host parts are avoided.
func TunnelAddress(prefix netip.Prefix, pub Key) netip.Addr {
	sum := sha256.Sum256(pub[:])
	base := prefix.Masked().Addr().AsSlice()
	bits := prefix.Bits()
	for i := range base {
		hostBits := len(base)*8 - bits - (len(base)-1-i)*8 // host bits in this byte, from its right
		switch {
		case hostBits <= 0:
			continue
		case hostBits >= 8:
			base[i] = sum[i]
		default:
			mask := byte(1<<hostBits - 1)
			base[i] = base[i]&^mask | sum[i]&mask
		}
	}
	a, _ := netip.AddrFromSlice(base)
	if a.Is4() {
		if a == prefix.Masked().Addr() {
			a = a.Next()
		} else if !a.Next().IsValid() || !prefix.Contains(a.Next()) {
			a = a.Prev()
		}
	}
	return a
}
