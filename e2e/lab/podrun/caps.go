//go:build linux

package main

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// capabilities by the names a securityContext uses.
var capabilities = map[string]uintptr{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "FSETID": unix.CAP_FSETID, "KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID,
	"SETUID": unix.CAP_SETUID, "SETPCAP": unix.CAP_SETPCAP, "LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "NET_BROADCAST": unix.CAP_NET_BROADCAST,
	"NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW, "IPC_LOCK": unix.CAP_IPC_LOCK,
	"IPC_OWNER": unix.CAP_IPC_OWNER, "SYS_MODULE": unix.CAP_SYS_MODULE, "SYS_RAWIO": unix.CAP_SYS_RAWIO,
	"SYS_CHROOT": unix.CAP_SYS_CHROOT, "SYS_PTRACE": unix.CAP_SYS_PTRACE, "SYS_PACCT": unix.CAP_SYS_PACCT,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_BOOT": unix.CAP_SYS_BOOT, "SYS_NICE": unix.CAP_SYS_NICE,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYS_TIME": unix.CAP_SYS_TIME, "SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG,
	"MKNOD": unix.CAP_MKNOD, "LEASE": unix.CAP_LEASE, "AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
	"AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "SETFCAP": unix.CAP_SETFCAP, "MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE,
	"MAC_ADMIN": unix.CAP_MAC_ADMIN, "SYSLOG": unix.CAP_SYSLOG, "WAKE_ALARM": unix.CAP_WAKE_ALARM,
	"BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND, "AUDIT_READ": unix.CAP_AUDIT_READ, "PERFMON": unix.CAP_PERFMON,
	"BPF": unix.CAP_BPF, "CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// runtimeDefault is containerd's default capability set for a container.
var runtimeDefault = []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}

// restrictCapabilities leaves the process (root) with exactly the capabilities the container
// gets from a runtime: the default set, minus securityContext.capabilities.drop, plus add. It
// empties the bounding set of everything else, so that after exec nothing more can be had, and
// sets no_new_privs when allowPrivilegeEscalation is false.
func restrictCapabilities(sc *corev1.SecurityContext) error {
	keep := map[string]bool{}
	for _, c := range runtimeDefault {
		keep[c] = true
	}
	if sc != nil && sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Drop {
			if strings.EqualFold(string(c), "ALL") {
				keep = map[string]bool{}
				break
			}
			delete(keep, strings.TrimPrefix(string(c), "CAP_"))
		}
		for _, c := range sc.Capabilities.Add {
			name := strings.TrimPrefix(string(c), "CAP_")
			if _, ok := capabilities[name]; !ok {
				return fmt.Errorf("securityContext.capabilities.add: unknown capability %q", c)
			}
			keep[name] = true
		}
	}
	for name, c := range capabilities {
		if keep[name] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("dropping CAP_%s: %w", name, err)
		}
	}
	if sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	return nil
}
