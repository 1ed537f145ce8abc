package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
)

func writeDev(t *testing.T, root, name, vendor, device, class string) {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"vendor": vendor, "device": device, "class": class} {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindPCI(t *testing.T) {
	root := t.TempDir()
	writeDev(t, root, "0000:00:01.0", "0x8086", "0x7000", "0x060100")
	writeDev(t, root, "0000:00:04.0", "0x7667", "0x0001", "0x030000") // wrong class
	writeDev(t, root, "0000:00:05.0", "0x7667", "0x0001", "0x030200")
	writeDev(t, root, "0000:00:06.0", "0x7667", "0x0001", "0x030200")
	got, err := findPCI(root)
	if want := filepath.Join(root, "0000:00:05.0"); err != nil || got != want {
		t.Errorf("findPCI() = %q, %v, want %q", got, err, want)
	}
	all, err := findAllPCI(root)
	if want := []string{filepath.Join(root, "0000:00:05.0"), filepath.Join(root, "0000:00:06.0")}; err != nil || len(all) != 2 || all[0] != want[0] || all[1] != want[1] {
		t.Errorf("findAllPCI() = %q, %v, want %q", all, err, want)
	}
	empty := t.TempDir()
	if _, err := findPCI(empty); !errors.Is(err, ErrNoDevice) {
		t.Errorf("findPCI(empty) = %v, want ErrNoDevice", err)
	}
}

func TestBARBounds(t *testing.T) {
	b := &bar{mem: make([]byte, abi.BAR0Size)}
	b.Write32(abi.RegRingTail, 0x12345678)
	if got := b.Read32(abi.RegRingTail); got != 0x12345678 {
		t.Errorf("Read32(tail) = %#x, want 0x12345678", got)
	}
	for _, off := range []uint32{1, abi.BAR0Size - 2, abi.BAR0Size, 0xfffffffc} {
		b.Write32(off, 1)
		if got := b.Read32(off); got != 0xffffffff {
			t.Errorf("Read32(%#x) = %#x, want 0xffffffff", off, got)
		}
	}
}

func TestPagemapMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pagemap hides page frame numbers from non-root")
	}
	dma, err := NewPagemapMemory().Alloc(3*abi.PageSize + 1)
	if err != nil {
		t.Fatalf("Alloc() = %v", err)
	}
	if len(dma.Pages) != 4 || len(dma.Buf) != 4*abi.PageSize {
		t.Fatalf("Alloc(3 pages + 1) = %d pages, %d bytes, want 4 pages", len(dma.Pages), len(dma.Buf))
	}
	seen := map[uint64]bool{}
	for i, p := range dma.Pages {
		if p == 0 || p%abi.PageSize != 0 || seen[p] {
			t.Errorf("page %d at %#x: zero, misaligned or repeated", i, p)
		}
		seen[p] = true
	}
	if _, err := NewPagemapMemory().Alloc(0); err == nil {
		t.Errorf("Alloc(0) = nil error")
	}
}

func TestReopenPCI(t *testing.T) {
	root := t.TempDir()
	var opened atomic.Value // the last directory OpenPCI was asked for
	open := func(dir string) (Registers, error) {
		opened.Store(dir)
		if _, err := os.Stat(filepath.Join(dir, "resource0")); err != nil {
			return nil, err
		}
		return &bar{mem: make([]byte, abi.BAR0Size)}, nil
	}
	// The device is plugged (its identity first, resource0 a little later)
	// while ReopenGuest waits.
	dev := filepath.Join(root, "0000:00:05.0")
	go func() {
		time.Sleep(30 * time.Millisecond)
		os.MkdirAll(dev, 0o755)
		for k, v := range map[string]string{"vendor": "0x7667", "device": "0x0001", "class": "0x030200"} {
			os.WriteFile(filepath.Join(dev, k), []byte(v+"\n"), 0o644)
		}
		time.Sleep(30 * time.Millisecond)
		os.WriteFile(filepath.Join(dev, "resource0"), nil, 0o644)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	regs, err := reopenPCI(ctx, root, "", open, time.Millisecond)
	if err != nil || regs == nil {
		t.Fatalf("reopenPCI(any) = %v, %v", regs, err)
	}
	if got := opened.Load(); got != dev {
		t.Errorf("opened %q, want %q", got, dev)
	}

	// A named directory must hold the vGPU's identity.
	other := filepath.Join(root, "0000:00:06.0")
	writeDev(t, root, "0000:00:06.0", "0x8086", "0x7000", "0x060100")
	os.WriteFile(filepath.Join(other, "resource0"), nil, 0o644)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := reopenPCI(ctx2, root, other, open, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNoDevice) {
		t.Errorf("reopenPCI(not a vgpu) = %v, want deadline exceeded and ErrNoDevice", err)
	}
	if _, err := reopenPCI(ctx, root, dev, open, time.Millisecond); err != nil {
		t.Errorf("reopenPCI(named vgpu) = %v", err)
	}
}

// TestWaitPCI: WaitPCI returns the vGPU's directory once it and its BAR0
// are in sysfs, and gives up with its context.
func TestWaitPCI(t *testing.T) {
	root := t.TempDir()
	writeDev(t, root, "0000:00:01.0", "0x8086", "0x7000", "0x060100")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := waitPCI(ctx, root, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNoDevice) {
		t.Errorf("waitPCI(no vgpu) = %v, want deadline exceeded and ErrNoDevice", err)
	}
	dev := filepath.Join(root, "0000:00:10.0")
	writeDev(t, root, "0000:00:10.0", "0x7667", "0x0001", "0x030200")
	go func() {
		// The kernel adds resource0 after the device directory.
		os.WriteFile(filepath.Join(dev, "resource0"), nil, 0o644)
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if got, err := waitPCI(ctx2, root, time.Millisecond); err != nil || got != dev {
		t.Errorf("waitPCI() = %q, %v, want %q", got, err, dev)
	}
}
