package mmio

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vgpud/vgpud/abi"
)

const longName = "pthread-0123456789-0123456789-0123456789-0123456789-0123456789-overlong"

func newTestDevice(t *testing.T) (*Device, *fakeBackend) {
	t.Helper()
	f := &fakeBackend{limits: Limits{
		MemBytes:     0x1_2345_6000,
		MaxAlloc:     0x4000_0000,
		ComputeUnits: 2,
		MaxWorkGroup: 1024,
		ProfileName:  "vgpu-small",
		DeviceName:   longName,
	}}
	return New(f), f
}

// TestRegisterOffsets pins the register map against the ABI document.
func TestRegisterOffsets(t *testing.T) {
	got := []int{abi.RegID, abi.RegVersion, abi.RegFeatures, abi.RegStatus, abi.RegMemSizeLo, abi.RegMemSizeHi,
		abi.RegMaxAllocLo, abi.RegMaxAllocHi, abi.RegComputeUnits, abi.RegMaxRingSlots, abi.RegMaxWorkGroup,
		abi.RegError, abi.RegErrorCount, abi.RegErrorAck, abi.RegRingBaseLo, abi.RegRingBaseHi,
		abi.RegComplBaseLo, abi.RegComplBaseHi, abi.RegRingSlots, abi.RegRingCtrl, abi.RegRingTail,
		abi.RegRingHead, abi.RegRingDone, abi.RegIntStatus, abi.RegIntEnable, abi.RegTailShadowLo, abi.RegTailShadowHi,
		abi.RegRingKick, abi.RegMaxContexts, abi.RegContextKick, abi.RegProfileName, abi.RegDeviceName,
		abi.RegDeviceName + abi.DeviceNameLen, abi.BAR0Size}
	want := []int{0x00, 0x04, 0x08, 0x0c, 0x10, 0x14, 0x18, 0x1c, 0x20, 0x24, 0x28, 0x30, 0x34, 0x38,
		0x40, 0x44, 0x48, 0x4c, 0x50, 0x54, 0x58, 0x5c, 0x60, 0x64, 0x68, 0x6c, 0x70, 0x74, 0x2c, 0x78, 0x80, 0xa0, 0xe0, 0x1000}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("register offsets (-want +got):\n%s", diff)
	}
}

func TestReadOnlyRegisters(t *testing.T) {
	d, _ := newTestDevice(t)
	tests := []struct {
		off  uint64
		want uint32
	}{
		{abi.RegID, abi.IDMagic},
		{abi.RegVersion, abi.Version},
		{abi.RegFeatures, abi.Features},
		{abi.RegStatus, 0},
		{abi.RegMemSizeLo, 0x2345_6000},
		{abi.RegMemSizeHi, 1},
		{abi.RegMaxAllocLo, 0x4000_0000},
		{abi.RegMaxAllocHi, 0},
		{abi.RegComputeUnits, 2},
		{abi.RegMaxRingSlots, abi.MaxRingSlots},
		{abi.RegMaxWorkGroup, 1024},
		{abi.RegError, 0},
		{abi.RegErrorCount, 0},
		{abi.RegErrorAck, 0},
		{abi.RegProfileName, 'v' | 'g'<<8 | 'p'<<16 | 'u'<<24},
		{abi.RegProfileName + 8, 'l' | 'l'<<8},
		{abi.RegProfileName + 28, 0},
		{abi.RegDeviceName, 'p' | 't'<<8 | 'h'<<16 | 'r'<<24},
		{abi.RegDeviceName + 60, binary.LittleEndian.Uint32([]byte(longName[60:64]))}, // truncated at 64 bytes
		{0x078, 0}, // unassigned
		{0xffc, 0}, // unassigned, last word
	}
	for _, tt := range tests {
		if got := d.ReadBAR(tt.off, 4); got != uint64(tt.want) {
			t.Errorf("ReadBAR(%#x, 4) = %#x, want %#x", tt.off, got, tt.want)
		}
		d.WriteBAR(tt.off, 4, 0xdeadbeef) // RO: ignored
		if got := d.ReadBAR(tt.off, 4); got != uint64(tt.want) {
			t.Errorf("ReadBAR(%#x, 4) after write = %#x, want %#x", tt.off, got, tt.want)
		}
	}
}

func TestRingProgramming(t *testing.T) {
	d, f := newTestDevice(t)
	writes := []struct{ off, v uint32 }{
		{abi.RegRingBaseLo, 0x0020_0000}, {abi.RegRingBaseHi, 0x1},
		{abi.RegComplBaseLo, 0x0030_0000}, {abi.RegComplBaseHi, 0x2},
		{abi.RegRingSlots, 256},
	}
	for _, w := range writes {
		d.WriteBAR(uint64(w.off), 4, uint64(w.v))
		if got := d.ReadBAR(uint64(w.off), 4); got != uint64(w.v) {
			t.Errorf("ReadBAR(%#x) = %#x, want %#x", w.off, got, w.v)
		}
	}
	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable)
	want := []RingConfig{{Base: 0x1_0020_0000, ComplBase: 0x2_0030_0000, Slots: 256}}
	if diff := cmp.Diff(want, f.enabled); diff != "" {
		t.Errorf("EnableRing calls (-want +got):\n%s", diff)
	}
	if got := d.ReadBAR(abi.RegRingCtrl, 4); got != abi.RingCtrlEnable {
		t.Errorf("RingCtrl = %#x, want Enable", got)
	}
	if got := d.ReadBAR(abi.RegStatus, 4); got != abi.StatusBitRingEnabled {
		t.Errorf("Status = %#x, want RingEnabled", got)
	}
	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable) // already enabled: no-op
	if len(f.enabled) != 1 {
		t.Errorf("EnableRing calls after second Enable = %d, want 1", len(f.enabled))
	}

	d.WriteBAR(abi.RegRingTail, 4, 7)
	if diff := cmp.Diff([]uint32{7}, f.doorbells); diff != "" {
		t.Errorf("Doorbell calls (-want +got):\n%s", diff)
	}
	for _, off := range []uint64{abi.RegRingHead, abi.RegRingDone, abi.RegRingTail} {
		if got := d.ReadBAR(off, 4); got != 7 {
			t.Errorf("ReadBAR(%#x) = %d, want 7", off, got)
		}
	}

	d.WriteBAR(abi.RegRingCtrl, 4, 0)
	if f.disables != 1 {
		t.Errorf("DisableRing calls = %d, want 1", f.disables)
	}
	if got := d.ReadBAR(abi.RegStatus, 4); got != 0 {
		t.Errorf("Status after disable = %#x, want 0", got)
	}

	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable|abi.RingCtrlReset)
	if f.resets != 1 {
		t.Errorf("Reset calls = %d, want 1", f.resets)
	}
	for _, w := range writes {
		if got := d.ReadBAR(uint64(w.off), 4); got != 0 {
			t.Errorf("ReadBAR(%#x) after reset = %#x, want 0", w.off, got)
		}
	}
	if got := d.ReadBAR(abi.RegRingCtrl, 4); got != 0 {
		t.Errorf("RingCtrl after reset = %#x, want 0", got)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name       string
		enableErr  error
		doorbelErr error
		do         func(d *Device)
		want       abi.Status
	}{
		{"enable fails", abi.Errorf(abi.StatusRingConfig, "slots"), nil,
			func(d *Device) { d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable) }, abi.StatusRingConfig},
		{"doorbell fails", nil, abi.Errorf(abi.StatusRingOverflow, "tail"),
			func(d *Device) { d.WriteBAR(abi.RegRingTail, 4, 99) }, abi.StatusRingOverflow},
		{"read unaligned", nil, nil, func(d *Device) { d.ReadBAR(2, 4) }, abi.StatusBadAccess},
		{"read byte", nil, nil, func(d *Device) { d.ReadBAR(0, 1) }, abi.StatusBadAccess},
		{"read qword", nil, nil, func(d *Device) { d.ReadBAR(0, 8) }, abi.StatusBadAccess},
		{"write word", nil, nil, func(d *Device) { d.WriteBAR(abi.RegRingSlots, 2, 8) }, abi.StatusBadAccess},
		{"write past BAR", nil, nil, func(d *Device) { d.WriteBAR(abi.BAR0Size, 4, 8) }, abi.StatusBadAccess},
		{"read huge offset", nil, nil, func(d *Device) { d.ReadBAR(^uint64(0)-3, 4) }, abi.StatusBadAccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, f := newTestDevice(t)
			f.enableErr, f.doorbelErr = tt.enableErr, tt.doorbelErr
			tt.do(d)
			if got := d.ReadBAR(abi.RegError, 4); got != uint64(tt.want) {
				t.Errorf("RegError = %v, want %v", abi.Status(got), tt.want)
			}
			if got := d.ReadBAR(abi.RegErrorCount, 4); got != 1 {
				t.Errorf("RegErrorCount = %d, want 1", got)
			}
			if got := d.ReadBAR(abi.RegStatus, 4); got != abi.StatusBitError {
				t.Errorf("RegStatus = %#x, want Error bit only", got)
			}
			if got := d.ReadBAR(abi.RegRingCtrl, 4); got != 0 {
				t.Errorf("RegRingCtrl = %#x, want 0", got)
			}
			d.WriteBAR(abi.RegErrorAck, 4, 1)
			if got := d.ReadBAR(abi.RegStatus, 4); got != 0 {
				t.Errorf("RegStatus after ack = %#x, want 0", got)
			}
			if got := d.ReadBAR(abi.RegError, 4); got != 0 {
				t.Errorf("RegError after ack = %v, want ok", abi.Status(got))
			}
		})
	}
}

func TestBadAccessReadsZero(t *testing.T) {
	d, _ := newTestDevice(t)
	for _, size := range []int{0, 1, 2, 3, 8, -1} {
		if got := d.ReadBAR(abi.RegID, size); got != 0 {
			t.Errorf("ReadBAR(RegID, %d) = %#x, want 0", size, got)
		}
	}
	d.WriteBAR(abi.RegRingSlots+1, 4, 0xffffffff)
	d.WriteBAR(abi.RegRingSlots, 8, 0xffffffff)
	if got := d.ReadBAR(abi.RegRingSlots, 4); got != 0 {
		t.Errorf("RingSlots after bad writes = %#x, want 0", got)
	}
}

func TestDeviceReset(t *testing.T) {
	d, f := newTestDevice(t)
	d.WriteBAR(abi.RegRingSlots, 4, 64)
	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable)
	d.Reset()
	if f.resets != 1 {
		t.Errorf("backend Reset calls = %d, want 1", f.resets)
	}
	if got := d.ReadBAR(abi.RegRingSlots, 4); got != 0 {
		t.Errorf("RingSlots after Reset = %d, want 0", got)
	}
	if got := d.ReadBAR(abi.RegStatus, 4); got != 0 {
		t.Errorf("Status after Reset = %#x, want 0", got)
	}
}

// TestRingStoppedByBackend: after the backend stops the ring on its own (a
// fault), the registers say so and a plain Enable restarts it.
func TestRingStoppedByBackend(t *testing.T) {
	f := &fakeBackend{}
	d := New(f)
	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable)
	f.mu.Lock()
	f.on = false // the backend faulted
	f.mu.Unlock()
	if got := d.ReadBAR(abi.RegStatus, 4); got&abi.StatusBitRingEnabled != 0 {
		t.Errorf("RegStatus after fault = %#x, want ring not enabled", got)
	}
	if got := d.ReadBAR(abi.RegRingCtrl, 4); got != 0 {
		t.Errorf("RegRingCtrl after fault = %#x, want 0", got)
	}
	d.WriteBAR(abi.RegRingCtrl, 4, abi.RingCtrlEnable)
	if len(f.enabled) != 2 {
		t.Errorf("EnableRing calls = %d, want 2", len(f.enabled))
	}
}

// TestRestoreSparesHotplugReset: after Restore the next reset (QEMU's,
// right after a hot-plug) leaves the backend alone; one after a BAR
// access does not.
func TestRestoreSparesHotplugReset(t *testing.T) {
	b := &fakeBackend{}
	d := New(b)
	d.Restore(RingConfig{Base: 0x1000, ComplBase: 0x2000, Slots: 8}, 5)
	d.Reset()
	if b.resets != 0 {
		t.Fatalf("backend reset %d times after Restore, want 0", b.resets)
	}
	if got := d.ReadBAR(abi.RegRingTail, 4); got != 5 {
		t.Errorf("tail after restore = %d, want 5", got)
	}
	d.Reset()
	if b.resets != 1 {
		t.Fatalf("backend reset %d times, want 1", b.resets)
	}
}

// TestHoldBackendSparesResets: while the backend is held (an incoming
// migration whose destination QEMU starts after the state arrived) every
// reset, BAR accesses between them or not, leaves the backend alone and
// clears the registers; Restore then sets them; released, resets reach
// the backend again.
func TestHoldBackendSparesResets(t *testing.T) {
	b := &fakeBackend{}
	d := New(b)
	d.HoldBackend(true)
	d.Reset()
	d.ReadBAR(abi.RegRingTail, 4)
	d.Reset()
	if b.resets != 0 {
		t.Fatalf("backend reset %d times while held, want 0", b.resets)
	}
	d.Restore(RingConfig{Base: 0x1000, ComplBase: 0x2000, Slots: 8}, 5)
	d.HoldBackend(false)
	if got := d.ReadBAR(abi.RegRingTail, 4); got != 5 {
		t.Errorf("tail after restore = %d, want 5", got)
	}
	d.Reset()
	if b.resets != 1 {
		t.Fatalf("backend reset %d times after release, want 1", b.resets)
	}
}

// TestKick checks the ABI 1.3 kick doorbell: the shadow address latches
// and reads back, a kick hands the backend that address (the register
// file cannot read guest RAM), a kick error latches, and a reset clears
// the shadow.
func TestKick(t *testing.T) {
	d, f := newTestDevice(t)
	if got := d.ReadBAR(abi.RegFeatures, 4); got&abi.FeatureKick == 0 {
		t.Fatalf("RegFeatures = %#x, want FeatureKick", got)
	}
	d.WriteBAR(abi.RegTailShadowLo, 4, 0x2345_6ffc)
	d.WriteBAR(abi.RegTailShadowHi, 4, 0x1)
	if lo, hi := d.ReadBAR(abi.RegTailShadowLo, 4), d.ReadBAR(abi.RegTailShadowHi, 4); lo != 0x2345_6ffc || hi != 1 {
		t.Errorf("shadow reads back %#x:%#x", hi, lo)
	}
	d.WriteBAR(abi.RegRingKick, 4, 0xdead) // the value means nothing
	d.WriteBAR(abi.RegRingKick, 4, 0)
	if diff := cmp.Diff([]uint64{0x1_2345_6ffc, 0x1_2345_6ffc}, f.kicks); diff != "" {
		t.Errorf("kicks (-want +got):\n%s", diff)
	}
	if got := d.ReadBAR(abi.RegRingKick, 4); got != 0 {
		t.Errorf("RegRingKick reads %#x, want 0 (write-only)", got)
	}
	if s := d.State(); s.Shadow != 0x1_2345_6ffc {
		t.Errorf("State().Shadow = %#x", s.Shadow)
	}
	d.Reset()
	if lo := d.ReadBAR(abi.RegTailShadowLo, 4); lo != 0 {
		t.Errorf("shadow after reset = %#x", lo)
	}
}

// TestContextKick checks the ABI 1.5 context doorbell: RegMaxContexts
// reads the backend's count, a kick hands the backend the context id,
// ids outside 1..RegMaxContexts latch StatusNotFound without reaching it,
// and the backend's refusal latches.
func TestContextKick(t *testing.T) {
	d, f := newTestDevice(t)
	if got := d.ReadBAR(abi.RegFeatures, 4); got&abi.FeatureContexts == 0 {
		t.Fatalf("RegFeatures = %#x, want FeatureContexts", got)
	}
	if got := d.ReadBAR(abi.RegMaxContexts, 4); got != 0 {
		t.Errorf("RegMaxContexts = %d with no contexts, want 0", got)
	}
	f.limits.Contexts = 3
	if got := d.ReadBAR(abi.RegMaxContexts, 4); got != 3 {
		t.Errorf("RegMaxContexts = %d, want 3", got)
	}
	for _, id := range []uint64{0, 4, 1 << 31} {
		d.WriteBAR(abi.RegContextKick, 4, id)
		if st, _ := f.Error(); st != abi.StatusNotFound {
			t.Errorf("kick of context %d latched %v, want not found", id, st)
		}
		d.WriteBAR(abi.RegErrorAck, 4, 0)
	}
	d.WriteBAR(abi.RegContextKick, 4, 3)
	d.WriteBAR(abi.RegContextKick, 4, 1)
	if diff := cmp.Diff([]uint32{3, 1}, f.ctxKicks); diff != "" {
		t.Errorf("context kicks (-want +got):\n%s", diff)
	}
	f.ctxKickErr = abi.Errorf(abi.StatusRingOverflow, "test")
	d.WriteBAR(abi.RegContextKick, 4, 2)
	if st, _ := f.Error(); st != abi.StatusRingOverflow {
		t.Errorf("refused kick latched %v, want ring overflow", st)
	}
	if got := d.ReadBAR(abi.RegContextKick, 4); got != 0 {
		t.Errorf("RegContextKick reads %#x, want 0 (write-only)", got)
	}
	f.limits.Contexts = 1000
	if got := d.ReadBAR(abi.RegMaxContexts, 4); got != abi.MaxContexts {
		t.Errorf("RegMaxContexts = %d for a backend offering 1000, want %d", got, abi.MaxContexts)
	}
}

// kickTaker is a fakeBackend that reads a kick eventfd itself
// (KickTaker): it records what the register file tells it.
type kickTaker struct {
	fakeBackend
	fds     []int
	shadows []uint64
}

func (k *kickTaker) TakeKicks(fd int) error { k.fds = append(k.fds, fd); return nil }
func (k *kickTaker) TailShadow(a uint64)    { k.shadows = append(k.shadows, a) }

// TestTakeKicks: a backend that reads the kick eventfd itself is handed
// it and told the tail shadow's address at every write of its halves and
// at a reset (0); one that cannot is refused with ErrUnsupported (the
// transport then watches the eventfd), and letting go of none is no error.
func TestTakeKicks(t *testing.T) {
	k := &kickTaker{}
	d := New(k)
	if err := d.TakeKicks(7); err != nil {
		t.Fatal(err)
	}
	d.WriteBAR(abi.RegTailShadowLo, 4, 0x2345_6ffc)
	d.WriteBAR(abi.RegTailShadowHi, 4, 0x1)
	d.Reset()
	if err := d.TakeKicks(-1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{7, -1}, k.fds); diff != "" {
		t.Errorf("fds handed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{0x2345_6ffc, 0x1_2345_6ffc, 0}, k.shadows); diff != "" {
		t.Errorf("shadows told (-want +got):\n%s", diff)
	}

	plain, _ := newTestDevice(t)
	if err := plain.TakeKicks(7); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("TakeKicks on a backend that reads none = %v, want ErrUnsupported", err)
	}
	if err := plain.TakeKicks(-1); err != nil {
		t.Errorf("TakeKicks(-1) on a backend that reads none = %v", err)
	}
}
