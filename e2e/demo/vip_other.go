//go:build !linux

package main

import (
	"context"
	"errors"
)

func vipDemoAvailable() (bool, string) {
	return false, "not Linux: the VIP lifecycle needs network namespaces"
}

func runVIP(context.Context, *timeline) error { return errors.New("not supported") }
