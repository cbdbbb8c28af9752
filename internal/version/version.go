// Package version reports which build of Better Compute is running, so that
// the server, the CLI and bcd can say it the same way.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is the release, set at link time with
// -ldflags "-X github.com/better-compute/better-compute/internal/version.Version=v0.1.0".
// An untagged build reports "devel".
var Version = "devel"

// Info describes one build.
type Info struct {
	// Version is the release, or "devel".
	Version string
	// Commit is the VCS revision, with "+dirty" when the tree had changes; empty when unknown.
	Commit string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	info := Info{Version: Version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if info.Version == "devel" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if info.Commit != "" && dirty {
		info.Commit += "+dirty"
	}
	return info
}

// String formats the build on one line, as `version` commands print it.
func (i Info) String() string {
	s := i.Version
	if i.Commit != "" {
		s += " (" + i.Commit + ")"
	}
	return s + " " + i.GoVersion
}
