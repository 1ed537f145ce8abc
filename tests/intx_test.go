package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/guestagent/syncjob"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// TestGuestBlocksOnINTx: a guest's vgpu-sync waits for its kernels by
// sleeping on the vGPU's INTx through uio_pci_generic (driver.UIOBlocker),
// and the interrupts arrive: on QEMU 11.1 over vfio-user, which delivers
// INTx under TCG too (docs/vfio-user.md "Interrupts"). It fails if the
// blocked waits all end at their 50 ms re-check, as they did while the
// blocker unmasked through a write to /dev/uioN, which uio_pci_generic
// refuses (ENOSYS). x-pci-proxy-dev delivers no interrupt under TCG, so
// QEMU 7.2 is not run.
func TestGuestBlocksOnINTx(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	m := hostOn(t, vfiouser.Transport{})
	inst := mustCreate(t, m, "vgpu-small")
	ctx, vm := bootSyncGuest(t, inst.Socket(), "vgpu.run=vgpu-sync vgpu.args=-agent,none,-blocker,uio,-modes,block,-steps,20", "")
	r := syncResult(ctx, t, vm)
	if r.Steps != 20 || r.Blocked == 0 || r.Checksum == 0 {
		t.Errorf("block on INTx: %+v, want 20 steps, some blocked, a result", r)
	}
	stats, err := vm.WaitLine(ctx, syncjob.UIOPrefix)
	if err != nil {
		t.Fatalf("no uio line: %v\nconsole:\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	var in, re uint64
	_, rest, _ := strings.Cut(stats, syncjob.UIOPrefix)
	if _, err := fmt.Sscanf(rest, "interrupts=%d rechecks=%d", &in, &re); err != nil {
		t.Fatalf("uio line %q: %v", stats, err)
	}
	t.Logf("guest: %+v; blocked waits ended by an interrupt %d, by the re-check %d", r, in, re)
	if in == 0 {
		t.Errorf("no blocked wait was ended by an interrupt (%d re-checks): INTx never reached the guest's uio_pci_generic", re)
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\nconsole:\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	if err := vm.Wait(); err != nil {
		t.Errorf("qemu: %v", err)
	}
}
