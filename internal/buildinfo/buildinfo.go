// Package buildinfo says which build of vgpud's programs is running: the
// module version, the VCS revision and the Go version, from what the Go
// toolchain stamps into every binary (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info identifies a build.
type Info struct {
	// Program is the program's name (vgpud, vgpuctl).
	Program string `json:"program"`
	// Module is the main module's path; Version its version ("(devel)"
	// for a build from a work tree).
	Module  string `json:"module"`
	Version string `json:"version"`
	// Revision is the VCS revision built, Time its commit time, Modified
	// whether the work tree had changes; empty without VCS stamping (go
	// test, -buildvcs=false).
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"go_version"`
}

// Get is the running binary's build, as program.
func Get(program string) Info {
	in := Info{Program: program, Version: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	in.Module, in.Version, in.GoVersion = bi.Main.Path, bi.Main.Version, bi.GoVersion
	if in.Version == "" {
		in.Version = "unknown"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is one line: "vgpud (devel) revision 0123abcd (modified) go1.26.0".
func (i Info) String() string {
	s := fmt.Sprintf("%s %s", i.Program, i.Version)
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " revision " + rev
		if i.Time != "" {
			s += " " + i.Time
		}
		if i.Modified {
			s += " (modified)"
		}
	}
	return s + " " + i.GoVersion
}
