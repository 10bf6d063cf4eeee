package bgp

import (
	"fmt"
	"os"
	"strings"
)

// readPassword reads a TCP-MD5 password file, refusing one that group or others can read: the
// password protects every session of the fabric, and the file usually sits next to world-readable
// configuration.
func readPassword(field, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %s is not a regular file", field, path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s: %s has mode %#o, readable by group or others; restrict it with chmod 600 %s", field, path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	switch {
	case pw == "":
		return "", fmt.Errorf("%s: %s is empty; put the password in it or remove passwordFile", field, path)
	case len(pw) > 80:
		// TCP_MD5SIG_MAXKEYLEN in the Linux kernel.
		return "", fmt.Errorf("%s: the password in %s is %d bytes; TCP-MD5 allows at most 80", field, path, len(pw))
	}
	return pw, nil
}
