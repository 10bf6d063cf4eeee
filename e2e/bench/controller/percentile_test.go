package main

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestPercentileNearestRank(t *testing.T) {
	g := NewWithT(t)
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	g.Expect(percentile(d, 50)).To(Equal(100 * time.Millisecond))
	g.Expect(percentile(d, 99)).To(Equal(198 * time.Millisecond))
	g.Expect(percentile(d, 100)).To(Equal(200 * time.Millisecond))
	g.Expect(percentile(d[:1], 99)).To(Equal(time.Millisecond))
}
