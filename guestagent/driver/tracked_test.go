package driver_test

import (
	"bytes"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// recorder collects completions handed to callbacks.
type recorder struct{ got []abi.Completion }

func (r *recorder) done(c abi.Completion) { r.got = append(r.got, c) }

func reapAll(t *testing.T, d *driver.Device) {
	t.Helper()
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reap(); err != nil {
		t.Fatalf("Reap() = %v", err)
	}
}

func TestTrackedTransfers(t *testing.T) {
	// A minimal staging pool: a 1 MiB transfer is split into chunks.
	d, _ := open(t, drivertest.Config{}, driver.Options{StagingBytes: driver.MinStagingBytes})
	const n = 1 << 20
	var create, write, read recorder
	b, err := d.CreateBufferNotify(n, 0, create.done)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := d.WriteNotify(b, 0, data, write.done); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	if err := d.ReadAsync(b, 0, dst, read.done); err != nil {
		t.Fatal(err)
	}
	reapAll(t, d)
	if d.Pending() != 0 {
		t.Errorf("Pending() = %d after reaping everything", d.Pending())
	}
	for name, r := range map[string]*recorder{"create": &create, "write": &write, "read": &read} {
		if len(r.got) != 1 || r.got[0].Status != abi.StatusOK {
			t.Errorf("%s completions = %+v, want one OK", name, r.got)
		}
	}
	if !bytes.Equal(dst, data) {
		t.Errorf("ReadAsync read back different bytes")
	}
}

func TestTrackedFailureOwned(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	var read, free recorder
	ghost := driver.Buffer{Handle: 999, Size: 64}
	dst := []byte("untouched")
	if err := d.ReadAsync(ghost, 0, dst, read.done); err != nil {
		t.Fatal(err)
	}
	if err := d.FreeNotify(ghost, free.done); err != nil {
		t.Fatal(err)
	}
	reapAll(t, d)
	if len(read.got) != 1 || read.got[0].Status != abi.StatusNotFound {
		t.Errorf("read of a missing buffer: completions %+v, want one NotFound", read.got)
	}
	if len(free.got) != 1 || free.got[0].Status == abi.StatusOK {
		t.Errorf("free of a missing buffer: completions %+v, want one failure", free.got)
	}
	if string(dst) != "untouched" {
		t.Errorf("failed read wrote %q into dst", dst)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() = %v: an owned failure was kept for it", err)
	}
}

func TestMarkerAndReap(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	var launch, marker recorder
	b, err := d.CreateBuffer(64 * 4)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := d.BuildFlags(fillSrc, "", abi.FlagNondeterministic)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.LaunchNotify(p, "fill", driver.Range1(64, 0), 0, []driver.Arg{driver.BufferArg(b), driver.Uint32Arg(5)}, launch.done); err != nil {
		t.Fatal(err)
	}
	if err := d.Marker(marker.done); err != nil {
		t.Fatal(err)
	}
	// Nothing is rung yet: Reap must not wait or ring.
	if n, err := d.Reap(); n != 0 || err != nil {
		t.Fatalf("Reap() before the doorbell = %d, %v; want 0, nil", n, err)
	}
	if len(marker.got) != 0 {
		t.Fatalf("marker completed before the doorbell")
	}
	reapAll(t, d)
	if len(launch.got) != 1 || launch.got[0].Status != abi.StatusOK || launch.got[0].Opcode != abi.OpLaunch {
		t.Errorf("launch completions = %+v", launch.got)
	}
	if len(marker.got) != 1 || marker.got[0].Status != abi.StatusOK || marker.got[0].Opcode != abi.OpFence {
		t.Errorf("marker completions = %+v", marker.got)
	}
	out := make([]byte, 8)
	if err := d.Read(b, 4, out); err != nil || out[0] != 6 {
		t.Errorf("Read after launch = %v, %v; want out[1] = 6", out, err)
	}
}

func TestTrackedAfterClose(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	d.Close()
	called := false
	if err := d.Marker(func(abi.Completion) { called = true }); err == nil {
		t.Errorf("Marker after Close succeeded")
	}
	if _, err := d.Reap(); err == nil {
		t.Errorf("Reap after Close succeeded")
	}
	if called {
		t.Errorf("a callback ran for a refused command")
	}
}
