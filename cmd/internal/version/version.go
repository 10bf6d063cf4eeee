// Package version holds the version and commit of the caplb binaries, set at build time with
// -ldflags "-X github.com/caplb/caplb/cmd/internal/version.Version=v0.1.0 -X ...Commit=abc123"
// (mk/release.mk). Without them, they come from the Go build info: the module version for a
// `go install ...@vX`, the VCS revision when the build recorded it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/caplb/caplb/internal/buildinfo"
)

// Set by the linker; empty means "ask the build info".
var (
	Version string
	Commit  string
)

// Info is what --version prints.
type Info struct {
	Version, Commit, GoVersion, Platform string
}

// Get returns the linker-set values, falling back to the build info.
func Get() Info {
	return get(Version, Commit, debug.ReadBuildInfo)
}

func get(v, c string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: v, Commit: c, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := read(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Commit == "" {
				info.Commit = s.Value
				if len(info.Commit) > 12 {
					info.Commit = info.Commit[:12]
				}
			}
			if s.Key == "vcs.modified" && s.Value == "true" && info.Commit != "" && c == "" {
				info.Commit += "-dirty"
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is the one line --version prints, e.g. "v0.1.0 (commit 1a2b3c4d5e6f, go1.26.8, linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

// BuildLabels are the labels of caplb_build_info for this build.
func (i Info) BuildLabels() buildinfo.Labels {
	return buildinfo.Labels{Version: i.Version, Revision: i.Commit, GoVersion: i.GoVersion}
}
