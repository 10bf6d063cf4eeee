package harness

import (
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func dial(host string, port int) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
	if err == nil {
		_ = c.Close()
	}
	return err
}

func TestListenersShareOnePort(t *testing.T) {
	g := NewWithT(t)
	l, err := Listen(0, "127.0.0.2", "127.0.0.3")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	g.Expect(l.Port).NotTo(BeZero())
	g.Expect(dial("127.0.0.2", l.Port)).To(Succeed())
	g.Expect(dial("127.0.0.3", l.Port)).To(Succeed())

	// Stopping one host leaves the other serving.
	l.Stop("127.0.0.2")
	g.Expect(dial("127.0.0.2", l.Port)).NotTo(Succeed())
	g.Expect(dial("127.0.0.3", l.Port)).To(Succeed())

	l.Close()
	g.Expect(dial("127.0.0.3", l.Port)).NotTo(Succeed())
}

func TestListenOnATakenPortFails(t *testing.T) {
	g := NewWithT(t)
	l, err := Listen(0, "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	_, err = Listen(l.Port, "127.0.0.1")
	g.Expect(err).To(MatchError(ContainSubstring("listen on 127.0.0.1")))
}
