package vfiouser_test

import (
	"context"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/mdev"
)

// TestUpgradeExportsAttachedSession: with a vfio-user VM attached, the
// manager pauses for an upgrade in place, and Export describes the VM's
// session for the new process: its connection, its DMA windows' and
// interrupts' fds among the extra descriptors, and its state. Abandoned
// (Unpause), the upgrade leaves the VM going on as if nothing happened.
func TestUpgradeExportsAttachedSession(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	m, _, c := attachedVM(t)
	if err := m.Pause(context.Background()); err != nil {
		t.Fatalf("Pause with a vfio-user VM attached: %v", err)
	}
	tab := handover.NewTable(nil)
	insts, _, _, err := m.Export(tab)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	defer tab.Close()
	if len(insts) != 1 || insts[0].QEMU == nil {
		t.Fatalf("Export = %+v, want one instance with its VM connection", insts)
	}
	q := insts[0].QEMU
	// The test client maps two windows with fds and wires INTx, its
	// unmask eventfd and the kick ioeventfd: five descriptors.
	if len(q.Extra) != 5 || len(q.Session) == 0 || q.IRQ != handover.None || q.Resample != handover.None {
		t.Errorf("exported VM connection: %d extra fds, state %s, irq %d, resample %d; want 5 extra and a state", len(q.Extra), q.Session, q.IRQ, q.Resample)
	}
	m.Unpause()
	if got := c.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("RegID after the abandoned upgrade = %#x (%v)", got, c.Err())
	}
	if _, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Errorf("Create after the abandoned upgrade: %v", err)
	}
}
