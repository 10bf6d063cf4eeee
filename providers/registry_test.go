package providers_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/caplb/caplb/providers"
	"github.com/caplb/caplb/providers/static"
)

func TestRegistry(t *testing.T) {
	g := NewWithT(t)
	reg, err := providers.NewRegistry(static.New())
	g.Expect(err).NotTo(HaveOccurred())
	b, err := reg.Get("static")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Kind()).To(Equal("static"))
	_, err = reg.Get("arp")
	g.Expect(err).To(MatchError(ContainSubstring(`no backend "arp" in this build; supported: [static]`)))
	g.Expect(reg.Kinds()).To(Equal([]string{"static"}))

	_, err = providers.NewRegistry(static.New(), static.New())
	g.Expect(err).To(MatchError(ContainSubstring("registered twice")))
}
