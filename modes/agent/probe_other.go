//go:build !linux

package agent

func newARPProber(string) vipProber { return nil }
