package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// TestGet: a test binary has build information: its Go version, a
// version, and String says all of it on one line.
func TestGet(t *testing.T) {
	in := Get("vgpud")
	if in.GoVersion != runtime.Version() || in.Version == "" || in.Program != "vgpud" {
		t.Errorf("Get = %+v", in)
	}
	s := in.String()
	if !strings.HasPrefix(s, "vgpud ") || !strings.HasSuffix(s, in.GoVersion) || strings.Contains(s, "\n") {
		t.Errorf("String = %q", s)
	}
}

// TestString: the revision is shortened and a modified tree said.
func TestString(t *testing.T) {
	for _, c := range []struct {
		in   Info
		want string
	}{
		{Info{Program: "vgpuctl", Version: "(devel)", GoVersion: "go1.26.0"}, "vgpuctl (devel) go1.26.0"},
		{Info{Program: "vgpud", Version: "v1.2.3", Revision: "0123456789abcdef", Time: "2026-11-27T00:00:00Z", Modified: true, GoVersion: "go1.26.0"},
			"vgpud v1.2.3 revision 0123456789ab 2026-11-27T00:00:00Z (modified) go1.26.0"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("String = %q, want %q", got, c.want)
		}
	}
}
