package mmio

import (
	"errors"
	"testing"

	"github.com/vgpud/vgpud/abi"
)

// countSink counts assertions of the line.
type countSink struct {
	n   int
	err error
}

func (s *countSink) RaiseIRQ() error {
	if s.err != nil {
		return s.err
	}
	s.n++
	return nil
}

func newINTxRig(t *testing.T) (*Device, *ConfigSpace, *countSink) {
	t.Helper()
	d, _ := newTestDevice(t)
	cs := NewConfigSpace()
	cs.SetINTx(d.INTx())
	s := &countSink{}
	d.INTx().SetSink(s)
	return d, cs, s
}

func TestINTxRegisters(t *testing.T) {
	d, cs, s := newINTxRig(t)
	x := d.INTx()
	rd := func(off uint64) uint64 { t.Helper(); return d.ReadBAR(off, 4) }
	want := func(what string, raised int, pending bool) {
		t.Helper()
		if s.n != raised || x.Pending() != pending {
			t.Errorf("%s: raised %d, Pending() = %v; want %d, %v", what, s.n, x.Pending(), raised, pending)
		}
		st := cs.Read(CfgStatus, 2)&StatusINTx != 0
		if st != pending {
			t.Errorf("%s: config status interrupt bit = %v, want %v", what, st, pending)
		}
	}

	if got := rd(abi.RegFeatures); got&abi.FeatureINTx == 0 {
		t.Fatalf("RegFeatures = %#x, want FeatureINTx", got)
	}
	// A completion latches the status bit but, not enabled, asserts nothing.
	x.Signal(abi.IntCompletion)
	if got := rd(abi.RegIntStatus); got != abi.IntCompletion {
		t.Errorf("RegIntStatus after a completion = %#x, want %#x", got, abi.IntCompletion)
	}
	want("disabled completion", 0, false)
	// Enabling with the bit latched asserts at once (level).
	d.WriteBAR(abi.RegIntEnable, 4, 0xffffffff)
	if got := rd(abi.RegIntEnable); got != abi.IntAll {
		t.Errorf("RegIntEnable after writing all ones = %#x, want %#x", got, abi.IntAll)
	}
	want("enable with status latched", 1, true)
	// More completions while high do not assert again.
	x.Signal(abi.IntCompletion)
	want("completion while high", 1, true)
	// Resample (EOI) while still high asserts again.
	x.Resample()
	want("resample while high", 2, true)
	// Writing 0 clears nothing (W1C).
	d.WriteBAR(abi.RegIntStatus, 4, 0)
	want("write 0 to status", 2, true)
	// W1C deasserts; a resample then does nothing.
	d.WriteBAR(abi.RegIntStatus, 4, abi.IntCompletion)
	if got := rd(abi.RegIntStatus); got != 0 {
		t.Errorf("RegIntStatus after W1C = %#x, want 0", got)
	}
	x.Resample()
	want("resample after W1C", 2, false)
	// The next completion rises again.
	x.Signal(abi.IntCompletion)
	want("next completion", 3, true)

	// INTx disable (uio_pci_generic's mask) holds the line low while the
	// status bit stays visible; clearing it re-asserts.
	cs.Write(CfgCommand, 2, CmdMemorySpace|CmdINTxDisable)
	x.Resample()
	want("resample with INTx disabled", 3, true)
	if x.Level() {
		t.Errorf("Level() with INTx disabled = true, want false")
	}
	cs.Write(CfgCommand, 2, CmdMemorySpace)
	want("INTx re-enabled while pending", 4, true)
	// A byte write elsewhere in config space leaves the line alone.
	cs.Write(CfgInterruptLine, 1, 11)
	want("unrelated config write", 4, true)

	// A device reset clears status and enable.
	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlReset)
	if rd(abi.RegIntStatus) != 0 || rd(abi.RegIntEnable) != 0 {
		t.Errorf("after reset: status %#x enable %#x, want 0, 0", rd(abi.RegIntStatus), rd(abi.RegIntEnable))
	}
	want("reset", 4, false)
	x.Signal(abi.IntCompletion)
	want("completion after reset (disabled)", 4, false)
	// Undefined bits are ignored.
	x.Signal(0xfffffffe)
	d.WriteBAR(abi.RegIntStatus, 4, abi.IntCompletion)
	if got := rd(abi.RegIntStatus); got != 0 {
		t.Errorf("RegIntStatus after undefined bits = %#x, want 0", got)
	}
}

func TestINTxSink(t *testing.T) {
	d, _ := newTestDevice(t)
	x := d.INTx()
	d.WriteBAR(abi.RegIntEnable, 4, abi.IntCompletion)
	x.Signal(abi.IntCompletion) // no sink yet: nothing to assert
	s := &countSink{}
	x.SetSink(s) // attaching while high asserts
	if s.n != 1 {
		t.Errorf("SetSink while high: raised %d, want 1", s.n)
	}
	other := &countSink{}
	x.ClearSink(other) // not the attached sink: no effect
	x.Resample()
	if s.n != 2 {
		t.Errorf("after ClearSink(other): raised %d, want 2", s.n)
	}
	x.ClearSink(s)
	x.Resample()
	if s.n != 2 {
		t.Errorf("after ClearSink(s): raised %d, want 2", s.n)
	}
	failing := &countSink{err: errors.New("boom")}
	x.SetSink(failing)
	if r, f := x.Raised(); r != 2 || f != 1 {
		t.Errorf("Raised() = %d, %d, want 2, 1", r, f)
	}
}

// TestPCIResetClearsINTxDisable: a PCI function reset returns the command
// register to 0, so the line is no longer masked.
func TestPCIResetClearsINTxDisable(t *testing.T) {
	d, cs, s := newINTxRig(t)
	cs.Write(CfgCommand, 2, CmdINTxDisable)
	d.WriteBAR(abi.RegIntEnable, 4, abi.IntCompletion)
	d.INTx().Signal(abi.IntCompletion)
	if s.n != 0 {
		t.Fatalf("raised %d with INTx disabled, want 0", s.n)
	}
	cs.Reset()
	if s.n != 1 {
		t.Errorf("after config reset: raised %d, want 1", s.n)
	}
}
