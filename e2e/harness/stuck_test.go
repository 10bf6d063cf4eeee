package harness

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestManagerGoroutines(t *testing.T) {
	g := NewWithT(t)
	dump := `goroutine 1 [running]:
main.main()

goroutine 7 [select, 2 minutes]:
sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).reconcileHandler(...)

goroutine 9 [IO wait]:
net.(*netFD).Read(...)

goroutine 11 [chan receive]:
sigs.k8s.io/cluster-api/controllers/clustercache.(*clusterCache).Reconcile(...)`
	held := managerGoroutines(dump)
	g.Expect(held).To(HaveLen(2))
	g.Expect(held[0]).To(HavePrefix("goroutine 7 "))
	g.Expect(held[1]).To(HavePrefix("goroutine 11 "))
}
