package version

import (
	"runtime/debug"
	"testing"
)

func TestGet(t *testing.T) {
	bi := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			b := &debug.BuildInfo{Main: debug.Module{Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return b, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name, v, c   string
		read         func() (*debug.BuildInfo, bool)
		wantV, wantC string
	}{
		{"ldflags win", "v0.2.0", "abc", bi("v9.9.9", "vcs.revision", "ffffffffffffffff"), "v0.2.0", "abc"},
		{"module version and revision", "", "", bi("v0.1.3", "vcs.revision", "0123456789abcdef0123"), "v0.1.3", "0123456789ab"},
		{"dirty tree", "", "", bi("(devel)", "vcs.revision", "0123456789abcdef", "vcs.modified", "true"), "devel", "0123456789ab-dirty"},
		{"nothing known", "", "", none, "devel", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get(tc.v, tc.c, tc.read)
			if got.Version != tc.wantV || got.Commit != tc.wantC {
				t.Errorf("got %s %s, want %s %s", got.Version, got.Commit, tc.wantV, tc.wantC)
			}
		})
	}
}
