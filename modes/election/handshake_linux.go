package election

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// kernelHandshake reports whether the listener at addr completed a TCP
// handshake by deadline, as this machine's kernel has it when this process
// looks. Go's dialer cannot answer that: when the process is starved of CPU
// past the deadline (a member booting beside it on the same cores), its
// deadline timer runs before its poller reports the connection, and a
// handshake the peer's kernel completed in a millisecond comes back as a
// timeout — the holder then counts as gone and is claimed beside
// (issue 36). poll(2) scans the socket once more when the thread runs after
// its timeout, so a handshake completed by then counts, and one that was not
// (nobody answered the SYN: the machine or the path went) still fails.
func kernelHandshake(addr netip.AddrPort, deadline time.Time, label string) bool {
	fd, err := connectStart(addr)
	if err != nil {
		return false
	}
	if !connectWait(fd, deadline) {
		_ = unix.Close(fd)
		return false
	}
	f := os.NewFile(uintptr(fd), "handshake")
	c, err := net.FileConn(f) // a duplicate: f is closed below either way
	_ = f.Close()
	if err == nil {
		sendLabel(c, label)
	}
	return true
}

// connectStart opens a non-blocking socket and starts connecting it to addr.
func connectStart(addr netip.AddrPort) (int, error) {
	ip := addr.Addr().Unmap()
	family, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Port: int(addr.Port()), Addr: ip.As4()})
	if ip.Is6() {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(addr.Port()), Addr: ip.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// connectWait waits until the connection on fd is established or failed, or
// deadline passed, and reports whether it is established. Past the deadline
// it still looks once (poll with no timeout): what counts is the kernel's
// state when this process runs, not when its timer fired.
func connectWait(fd int, deadline time.Time) bool {
	for {
		ms := int((time.Until(deadline) + time.Millisecond - 1) / time.Millisecond)
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, max(ms, 0))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		return err == nil && soErr == 0
	}
}
