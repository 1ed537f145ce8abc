package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/sched"
)

// Lines printed by guestagent/cmd/vgpu-spin.
const (
	spinStart = "VGPU-SPIN start"
	spinDone  = "VGPU-SPIN done "
)

// spinResult is vgpu-spin's done line.
type spinResult struct {
	Launches int     `json:"launches"`
	Seconds  float64 `json:"seconds"`
	Checked  bool    `json:"checked"`
}

// TestFixedShareTwoGuests: two VMs with shares 1 and 3 keep one device
// busy at once under fixed-share. Over the time both run, vgpud charges
// the share-3 guest more device time than the share-1 guest; each guest's
// commands complete in order (the driver checks every record's sequence)
// and without errors, and each checks its results.
func TestFixedShareTwoGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	k := imagetest.RequireKernel(t)
	initrd := imagetest.Initramfs(t, k, "github.com/vgpud/vgpud/guestagent/cmd/vgpu-spin")
	m := host(t)
	if p, err := m.Policy(0); err != nil || p != sched.PolicyFixedShare {
		t.Fatalf("Policy(0) = %s, %v", p, err)
	}
	light, heavy := mustCreate(t, m, "vgpu-small"), mustCreate(t, m, "vgpu-small")
	if err := m.SetShare(heavy.UUID(), 3); err != nil {
		t.Fatal(err)
	}
	insts := []*mdev.Instance{light, heavy}
	for _, in := range insts {
		// vgpu-spin repeats one launch: result reuse (on by default) would
		// answer it from the table and the guests would use no device time.
		if err := m.SetReuse(in.UUID(), mdev.ReuseSetting{Off: true}); err != nil {
			t.Fatal(err)
		}
	}

	type vmOut struct {
		res     spinResult
		console string
		err     error
	}
	started := make(chan int, 2)
	done := make(chan int, 2)
	outs := make([]vmOut, 2)
	var wg sync.WaitGroup
	for i, inst := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i].res, outs[i].console, outs[i].err = runSpin(t.Context(), inst, k.Vmlinuz, initrd, func() { started <- i }, func() { done <- i })
		}()
	}
	// The window: from both guests spinning to the first one finishing.
	var before [2]sched.ClientStats
	for range 2 {
		select {
		case <-started:
		case <-waitGroupDone(&wg):
			t.Fatalf("a guest ended before both started: %+v", outs)
		}
	}
	for i, inst := range insts {
		before[i] = inst.Sched()
	}
	select {
	case <-done:
	case <-waitGroupDone(&wg):
	}
	var dev [2]uint64
	for i, inst := range insts {
		dev[i] = inst.Sched().DeviceNanos - before[i].DeviceNanos
	}
	wg.Wait()
	for i, o := range outs {
		if o.err != nil || !o.res.Checked || o.res.Launches == 0 {
			t.Errorf("guest %d: %+v, %v\nconsole:\n%s", i, o.res, o.err, o.console)
		}
		s := insts[i].Stats()
		if s.Errors.Load() != 0 || insts[i].Done() != insts[i].Head() {
			t.Errorf("guest %d: %d errors, %d of %d commands completed", i, s.Errors.Load(), insts[i].Done(), insts[i].Head())
		}
	}
	t.Logf("device time while both ran: share 1 %.3fs, share 3 %.3fs (%.1f%% for share 3, 75%% wanted)",
		float64(dev[0])/1e9, float64(dev[1])/1e9, float64(dev[1])/float64(dev[0]+dev[1])*100)
	if dev[0] == 0 || dev[1] == 0 {
		t.Fatalf("a guest got no device time while both ran: %v", dev)
	}
	// Generous: the weighted guest gets clearly more, not exactly 3x.
	if float64(dev[1]) < 1.5*float64(dev[0]) {
		t.Errorf("device time while both ran: share 3 got %d ns, share 1 got %d ns; want share 3 at least 1.5x", dev[1], dev[0])
	}
}

func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// runSpin boots a VM running vgpu-spin on inst; started and finished are
// called when its start and done lines appear.
func runSpin(ctx context.Context, inst *mdev.Instance, kernel, initrd string, started, finished func()) (spinResult, string, error) {
	f, err := qemuvm.DialProxy(inst.Socket())
	if err != nil {
		return spinResult{}, "", err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, vmTimeout)
	defer cancel()
	vm, err := qemuvm.Start(ctx, qemuvm.Config{
		Kernel: kernel, Initrd: initrd, MemMiB: 512,
		Append:  "vgpu.run=vgpu-spin vgpu.args=-duration=20s,-items=16384,-iters=20,-batch=16",
		Devices: []qemuvm.ProxyDevice{{ID: "vgpu0", FD: f}},
	})
	if err != nil {
		return spinResult{}, "", err
	}
	defer vm.Kill()
	f.Close()
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vm.WaitLine(ctx, spinStart); err != nil {
		return spinResult{}, console(), fmt.Errorf("no start line: %w", err)
	}
	started()
	line, err := vm.WaitLine(ctx, spinDone)
	finished()
	if err != nil {
		return spinResult{}, console(), fmt.Errorf("no done line: %w", err)
	}
	var r spinResult
	_, js, _ := strings.Cut(line, spinDone)
	if err := json.Unmarshal([]byte(strings.TrimSpace(js)), &r); err != nil {
		return r, console(), fmt.Errorf("done line %q: %w", line, err)
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit="); err != nil {
		return r, console(), fmt.Errorf("guest did not finish: %w", err)
	}
	if err := vm.Wait(); err != nil {
		return r, console(), fmt.Errorf("qemu: %w", err)
	}
	return r, console(), nil
}
