package tests

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/interference/interferencetest"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// runResident drives a QEMU-less VM on instance id of d: n launches of a
// one-item kernel whose loop runs iters times.
func runResident(t *testing.T, d *migratetest.Daemon, id string, iters, n int) {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: d.InstanceBase(id) + ".sock", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := mpqemutest.NewVM(c, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	dev, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	prog, _, err := dev.Build(`__kernel void k(__global float *b, int iters) {
		float x = b[get_global_id(0)];
		for (int i = 0; i < iters; i++) x = x * 0.999f + 0.5f;
		b[get_global_id(0)] = x;
	}`, "")
	if err != nil {
		t.Fatal(err)
	}
	buf, err := dev.CreateBuffer(4)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := dev.Launch(prog, "k", driver.Range1(1, 1), driver.BufferArg(buf), driver.Int32Arg(int32(iters))); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestPlacementAcrossDaemons: vgpud processes stand for hosts.
// With a dataset the daemons place by the interference model by default
// (without one, by fewest instances); the residents' features are what
// they really ran; vgpuctl create -hosts puts a short-kernel newcomer on
// the host whose resident runs short kernels, away from the long-kernel
// one, and a long-kernel newcomer the other way.
func TestPlacementAcrossDaemons(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, tls := filepath.Join(dir, "bin"), filepath.Join(dir, "tls")
	for _, d := range []string{bin, tls} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := migratetest.BuildTools(ctx, bin); err != nil {
		t.Fatal(err)
	}
	ca, err := migratetest.MakeCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteHostDir(tls); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "interference.json")
	if err := interferencetest.ShortLong().Save(data); err != nil {
		t.Fatal(err)
	}
	start := func(name string, flags ...string) *migratetest.Daemon {
		run := filepath.Join(dir, name)
		if err := os.Mkdir(run, 0o700); err != nil {
			t.Fatal(err)
		}
		d, err := migratetest.StartDaemonFlags(ctx, bin, run, "0", tls, flags)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			d.Stop()
			if t.Failed() {
				t.Logf("vgpud %s log:\n%s", name, d.Logs())
			}
		})
		return d
	}
	plain := start("plain")
	if out, err := plain.Ctl(ctx, "place"); err != nil || !strings.Contains(out, "policy: fewest") {
		t.Fatalf("without a dataset: place = %q, %v", out, err)
	}
	a := start("a", "-placement-dataset", data)
	b := start("b", "-placement-dataset", data)
	for _, d := range []*migratetest.Daemon{a, b} {
		if out, err := d.Ctl(ctx, "place"); err != nil || !strings.Contains(out, "policy: interference") {
			t.Fatalf("with a dataset: place = %q, %v", out, err)
		}
	}
	longID, err := a.Create(ctx, "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	shortID, err := b.Create(ctx, "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	runResident(t, a, longID, 3_000_000, 2)
	runResident(t, b, shortID, 10, 20)

	hosts := strings.Join([]string{filepath.Join(a.RunDir, "control.sock"), filepath.Join(b.RunDir, "control.sock")}, ",")
	out, err := a.Ctl(ctx, "place", "-explain", "-profile", "vgpu-small", "-workload", "short0", "-hosts", hosts)
	if err != nil {
		t.Fatalf("place -explain = %v: %s", err, out)
	}
	t.Logf("place -explain -workload short:\n%s", out)
	for _, c := range []struct{ workload, want string }{{"short0", b.RunDir}, {"long1", a.RunDir}} {
		out, err := a.Ctl(ctx, "create", "-profile", "vgpu-small", "-workload", c.workload, "-hosts", hosts)
		if err != nil {
			t.Fatalf("create -workload %s -hosts = %v: %s", c.workload, err, out)
		}
		if !strings.Contains(out, "placed on "+filepath.Join(c.want, "control.sock")) {
			t.Errorf("a %s-kernel newcomer: %q, want it on %s", c.workload, out, c.want)
		}
	}
	// The model's features of the residents are in vgpuctl show.
	out, err = a.Ctl(ctx, "show", longID)
	if err != nil || !strings.Contains(out, `"long_kernel_mean_ms"`) {
		t.Errorf("show = %q, %v", out, err)
	}
}
