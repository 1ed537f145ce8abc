package qemuvm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/internal/syncbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeQEMU writes a shell script standing in for QEMU and returns a Config
// running it.
func fakeQEMU(t *testing.T, script string) Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-qemu")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Config{QEMU: p, Kernel: "k", Initrd: "i"}
}

func TestConsoleLines(t *testing.T) {
	cfg := fakeQEMU(t, `
printf 'boot\r\nVGPU-X one\r\nnoise\nVGPU-X two\n'
for fd in 3 4 5; do [ -e /dev/fd/$fd ] && echo "fd $fd open"; done
printf 'partial'
`)
	var log syncbuf.Buffer // the console goroutine writes it, the test reads it
	cfg.SerialLog = &log
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	cfg.Devices = []ProxyDevice{{ID: "vgpu0", FD: r}, {ID: "vgpu1", FD: w}}

	vm, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(vm.Kill)
	ctx := context.Background()
	for _, want := range []string{"VGPU-X one", "VGPU-X two"} {
		if got, err := vm.WaitLine(ctx, "VGPU-X"); got != want || err != nil {
			t.Errorf("WaitLine(VGPU-X) = %q, %v, want %q, nil", got, err, want)
		}
	}
	if got, err := vm.WaitLine(ctx, "partial"); got != "partial" || err != nil {
		t.Errorf("WaitLine(partial) = %q, %v, want the unterminated last line", got, err)
	}
	if _, err := vm.WaitLine(ctx, "VGPU-X"); !errors.Is(err, ErrExited) {
		t.Errorf("third WaitLine(VGPU-X) = %v, want ErrExited", err)
	}
	if err := vm.Wait(); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
	want := []string{"boot", "VGPU-X one", "noise", "VGPU-X two", "fd 3 open", "fd 4 open", "partial"}
	if got := vm.Lines(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Lines() = %q, want %q", got, want)
	}
	if got := log.String(); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("SerialLog got %q, want %q", got, strings.Join(want, "\n")+"\n")
	}
}

func TestLongLineSplit(t *testing.T) {
	cfg := fakeQEMU(t, `head -c 100000 /dev/zero | tr '\0' a; echo; echo end`)
	vm, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(vm.Kill)
	if err := vm.Wait(); err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	lines := vm.Lines()
	total := 0
	for _, l := range lines[:len(lines)-1] {
		if len(l) > maxLineLen {
			t.Errorf("line of %d bytes, want at most %d", len(l), maxLineLen)
		}
		total += len(l)
	}
	if total != 100000 || lines[len(lines)-1] != "end" {
		t.Errorf("split lines hold %d bytes then %q, want 100000 then \"end\"", total, lines[len(lines)-1])
	}
}

func TestExitBeforeLine(t *testing.T) {
	cfg := fakeQEMU(t, `echo booting; echo "qemu: oops" >&2; exit 3`)
	vm, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(vm.Kill)
	_, err = vm.WaitLine(context.Background(), "VGPU-INIT exit=")
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "qemu: oops") || !strings.Contains(err.Error(), "booting") {
		t.Errorf("WaitLine = %v, want ErrExited quoting the console and stderr", err)
	}
	if err := vm.Wait(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Wait() = %v, want exit status 3", err)
	}
}

func TestContextCancelKills(t *testing.T) {
	cfg := fakeQEMU(t, `echo up; exec sleep 600`)
	ctx, cancel := context.WithCancel(context.Background())
	vm, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(vm.Kill)
	if _, err := vm.WaitLine(context.Background(), "up"); err != nil {
		t.Fatalf("WaitLine(up) = %v", err)
	}
	waitCtx, stop := context.WithCancel(context.Background())
	stop()
	if _, err := vm.WaitLine(waitCtx, "never"); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitLine(cancelled ctx) = %v, want context.Canceled", err)
	}
	cancel()
	if err := vm.Wait(); err == nil {
		t.Errorf("Wait() after cancel = nil, want the kill reported")
	}
	vm.Kill() // no-op after exit
}

func TestKill(t *testing.T) {
	cfg := fakeQEMU(t, `exec sleep 600`)
	vm, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	vm.Kill()
	select {
	case <-vm.Done():
	default:
		t.Errorf("Done() open after Kill, want closed")
	}
	vm.Kill()
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(context.Background(), Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("Start(Config{}) = %v, want ErrConfig", err)
	}
	cfg := Config{QEMU: filepath.Join(t.TempDir(), "absent"), Kernel: "k", Initrd: "i"}
	if _, err := Start(context.Background(), cfg); err == nil {
		t.Errorf("Start(missing binary) = nil, want error")
	}
}
