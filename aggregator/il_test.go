package aggregator

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/iltest"
)

// TestILBuild: a SPIR-V module (program-build with abi.FlagIL) builds
// through the ring where the physical device takes SPIR-V, as
// device-info version 3 says, and its kernel computes; a bad module fails
// only its own build, with the reason in the log; the flag on any other
// command is refused; the program moves with a live migration to an
// instance on another device model and is rebuilt there from the module.
// On a device without SPIR-V (PoCL 3.1) the build fails with a log that
// says so; make test-platforms runs the rest on PoCL 6 and rusticl.
func TestILBuild(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "il", 1<<20)
	cmd, read := g.deviceInfoCmd(abi.PageSize)
	cmd.Payload[4] = abi.DeviceInfoVersionIL
	g.mustOK(g.run(cmd)...)
	info, err := abi.UnmarshalDeviceInfo(read())
	if err != nil {
		t.Fatal(err)
	}
	takesIL := d.Info().Caps.IL
	if info.Version != abi.DeviceInfoVersionIL || (info.IL == abi.DeviceILSPIRV) != takesIL {
		t.Fatalf("device-info version 3: version %d, il %#x; the device takes SPIR-V: %v", info.Version, info.IL, takesIL)
	}
	ilBuild := func(h uint32, module []byte) (abi.Command, uint64) {
		c, logAddr := g.build(h, string(module), 4096)
		c.Flags |= abi.FlagIL
		return c, logAddr
	}
	logOf := func(addr uint64, n uint64) string { return string(g.get(addr, int(n))) }

	flagged := abi.NewCommand(&abi.BufferCreate{Handle: 9, Size: 16}, 0, 0)
	flagged.Flags |= abi.FlagIL
	if rec := g.run(flagged)[0]; rec.Status != abi.StatusInvalidArgument {
		t.Errorf("flag il on buffer-create: %v, want StatusInvalidArgument", rec.Status)
	}
	if !takesIL {
		c, logAddr := ilBuild(1, iltest.Scale)
		rec := g.run(c)[0]
		if rec.Status != abi.StatusBuildFailed || !strings.Contains(logOf(logAddr, rec.Detail), "builds no SPIR-V") {
			t.Fatalf("a SPIR-V build on %s: %v, log %q; want StatusBuildFailed saying it builds no SPIR-V", d.Info().Name, rec.Status, logOf(logAddr, rec.Detail))
		}
		// Not a skip (make test fails on skips): the refusal is what such
		// a device must do; make test-platforms runs the rest.
		t.Logf("%s builds no SPIR-V: only the refusal was checked", d.Info().Name)
		return
	}

	le := binary.LittleEndian
	in := make([]byte, 0, 16)
	for _, v := range []float32{1, 2, 3, 4} {
		in = le.AppendUint32(in, math.Float32bits(v))
	}
	scale := abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{4}, Kernel: "scale", Args: []abi.KernelArg{
		{Kind: abi.ArgBuffer, Handle: 1}, {Kind: abi.ArgScalar, Bytes: le.AppendUint32(nil, math.Float32bits(2))}}}
	build, _ := ilBuild(1, iltest.Scale)
	dl, got := g.download(1, 16)
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 16}, 0, 0), g.upload(1, in), build, g.launch(1, scale), dl)...)
	if v := floats(got()); !slices.Equal(v, []float32{2, 4, 6, 8}) {
		t.Errorf("scale through the ring: %v, want [2 4 6 8]", v)
	}

	bad := slices.Clone(iltest.Scale)
	le.PutUint32(bad[4:], 0x00010300) // SPIR-V 1.3
	c, logAddr := ilBuild(2, bad)
	if rec := g.run(c)[0]; rec.Status != abi.StatusBuildFailed || !strings.Contains(logOf(logAddr, rec.Detail), "1.0 to 1.2") {
		t.Errorf("a SPIR-V 1.3 module: %v, log %q; want StatusBuildFailed naming the versions taken", rec.Status, logOf(logAddr, rec.Detail))
	}
	// A scalar where the module declares a buffer fails its launch alone.
	wrong := scale
	wrong.Args = slices.Clone(scale.Args)
	wrong.Args[0] = abi.KernelArg{Kind: abi.ArgScalar, Bytes: make([]byte, 8)}
	if rec := g.run(g.launch(1, wrong))[0]; rec.Status != abi.StatusLaunchFailed {
		t.Errorf("a scalar for the module's buffer parameter: %v, want StatusLaunchFailed", rec.Status)
	}

	// Migrate to plain PoCL, a second device model: the program is
	// rebuilt from its module there and the next launch runs on it.
	plain, err := gpu.OpenPlain("")
	if err != nil {
		t.Fatal(err)
	}
	dl, got = g.download(1, 16)
	migratePending(t, g, newDeviceOn(t, plain), g.launch(1, scale), dl)
	if v := floats(got()); !slices.Equal(v, []float32{4, 8, 12, 16}) {
		t.Errorf("scale after the migration: %v, want [4 8 12 16]", v)
	}
}
