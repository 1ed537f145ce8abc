package worker

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// TestDiagnose runs the sandbox diagnosis on this host's platform (PoCL):
// with the derived policy the kernel runs in a confined worker; with the
// policy short of PoCL's headers the build fails and the diagnosis names
// the missing directory, and the system calls the filter refuses are
// named too.
func TestDiagnose(t *testing.T) {
	if rep := sandbox.Probe(); !rep.Seccomp || !rep.View {
		t.Fatalf("the diagnosis needs seccomp and a file view: %+v", rep)
	}
	ctx := context.Background()
	full := sandbox.DefaultPolicy("")
	d, err := Diagnose(ctx, DiagnoseConfig{Policy: full, Device: os.Getenv("VGPUD_TEST_DEVICE")})
	if err != nil {
		t.Fatalf("Diagnose = %v (worker stderr: %s)", err, d.Stderr)
	}
	if !d.OK() {
		t.Fatalf("the kernel did not run with the derived policy: %+v\nstderr: %s", d.SelfTest, d.Stderr)
	}
	t.Logf("derived policy: %d denials: %v", len(d.Denials), d.Denials)
	// Where the device takes SPIR-V, the self-test built its kernel from
	// a module too (PoCL 6 runs llvm-spirv for it: make test-platforms).
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatal(err)
	}
	takesIL := dev.Info().Caps.IL
	dev.Close()
	if d.SelfTest.IL != takesIL {
		t.Errorf("self-test built from SPIR-V: %v; the device takes SPIR-V: %v", d.SelfTest.IL, takesIL)
	}
	if !slices.Contains(full.Read, "/usr/share/pocl") {
		// make test-platforms: rusticl's policy holds no PoCL headers.
		t.Logf("the platform is not PoCL: the checks of PoCL's chmod and headers do not apply")
		return
	}
	// PoCL changes its built kernels' modes; the filter refuses chmod.
	if !slices.ContainsFunc(d.Denials, func(x sandbox.Denial) bool { return x.Kind == "syscall" && x.Syscall == "chmod" }) {
		t.Errorf("the diagnosis does not name the refused chmod: %v", d.Denials)
	}

	short := full
	short.Read = slices.DeleteFunc(slices.Clone(full.Read), func(p string) bool { return p == "/usr/share/pocl" })
	if len(short.Read) == len(full.Read) {
		t.Fatalf("the derived policy lacks /usr/share/pocl: %q", full.Read)
	}
	d, err = Diagnose(ctx, DiagnoseConfig{Policy: short, Device: os.Getenv("VGPUD_TEST_DEVICE")})
	if err != nil {
		t.Fatalf("Diagnose = %v", err)
	}
	if d.OK() || d.SelfTest.Step != "build" {
		t.Errorf("without PoCL's headers: self-test %+v, want a failed build", d.SelfTest)
	}
	found := slices.ContainsFunc(d.Denials, func(x sandbox.Denial) bool {
		return x.Kind == "file" && strings.HasPrefix(x.Path, "/usr/share/pocl/")
	})
	if !found {
		t.Errorf("the diagnosis does not name PoCL's headers: %v", d.Denials)
	}
}
