package qemuvm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// bootTimeout bounds a whole boot under TCG on a loaded CI machine.
const bootTimeout = 3 * time.Minute

// TestBootEdu boots the real guest kernel with vgpu-init and
// vgpu-mmiobench next to QEMU's edu device and reads the benchmark's
// result from the console.
func TestBootEdu(t *testing.T) {
	k := imagetest.RequireKernel(t)
	initrd := imagetest.Initramfs(t, k, "github.com/vgpud/vgpud/guestagent/cmd/vgpu-mmiobench")

	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	var serial strings.Builder
	cfg := qemuvm.Config{
		Kernel:       k.Vmlinuz,
		Initrd:       initrd,
		Append:       "vgpu.run=vgpu-mmiobench vgpu.args=-dev,1234:11e8,-n,2000",
		ExtraDevices: []string{"edu"},
		SerialLog:    &serial,
	}
	start := time.Now()
	vm, err := qemuvm.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(vm.Kill)
	t.Logf("command: %s", vm.CommandLine())

	if _, err := vm.WaitLine(ctx, "VGPU-INIT run="); err != nil {
		t.Fatal(err)
	}
	t.Logf("boot to init's program: %v", time.Since(start).Round(time.Millisecond))
	ops := map[string]bool{}
	for range 2 {
		l, err := vm.WaitLine(ctx, "VGPU-MMIOBENCH ")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Device  string  `json:"device"`
			Op      string  `json:"op"`
			N       int     `json:"n"`
			NSPerOp float64 `json:"ns_per_op"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "VGPU-MMIOBENCH ")), &r); err != nil {
			t.Fatalf("decode %q: %v", l, err)
		}
		if r.Device != "1234:11e8" || r.N != 2000 || r.NSPerOp <= 0 {
			t.Errorf("benchmark line %q, want device 1234:11e8, n 2000, ns_per_op > 0", l)
		}
		ops[r.Op] = true
		t.Logf("edu MMIO %s: %.0f ns/op", r.Op, r.NSPerOp)
	}
	if !ops["write"] || !ops["read"] {
		t.Errorf("benchmark ops %v, want write and read", ops)
	}
	if l, err := vm.WaitLine(ctx, "VGPU-INIT exit="); err != nil || l != "VGPU-INIT exit=0" {
		t.Errorf("WaitLine(VGPU-INIT exit=) = %q, %v, want \"VGPU-INIT exit=0\"", l, err)
	}
	if err := vm.Wait(); err != nil {
		t.Errorf("Wait() = %v, want nil (guest powered off)", err)
	}
	t.Logf("boot, benchmark and power-off: %v", time.Since(start).Round(time.Millisecond))
	if strings.Contains(serial.String(), "VGPU-INIT error") {
		t.Errorf("console has init errors:\n%s", serial.String())
	}
}
