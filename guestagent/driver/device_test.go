package driver_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// fill(__global uint *out, uint v): out[i] = v + i.
func fill(d *abi.LaunchDesc, buf func(uint32) []byte) error {
	out := buf(d.Args[0].Handle)
	v := uint32(d.Args[1].Bytes[0]) | uint32(d.Args[1].Bytes[1])<<8 | uint32(d.Args[1].Bytes[2])<<16 | uint32(d.Args[1].Bytes[3])<<24
	for i := uint64(0); i < d.GlobalSize[0]; i++ {
		o := 4 * i
		x := v + uint32(i)
		out[o], out[o+1], out[o+2], out[o+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	return nil
}

const fillSrc = "__kernel void fill(__global uint *out, uint v) { out[get_global_id(0)] = v + get_global_id(0); }"

func open(t *testing.T, cfg drivertest.Config, opts driver.Options) (*driver.Device, *drivertest.Device) {
	t.Helper()
	f := drivertest.New(cfg, map[string]drivertest.KernelFunc{"fill": fill})
	d, err := driver.Open(f, f, opts)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, f
}

func TestOpenInfo(t *testing.T) {
	d, _ := open(t, drivertest.Config{MemSize: 1 << 30}, driver.Options{})
	in := d.Info()
	if in.MemSize != 1<<30 || in.Profile != "fake-1g" || in.Name != "drivertest fake vgpu" || in.Version != abi.Version {
		t.Errorf("Info() = %+v, want 1 GiB fake-1g drivertest fake vgpu", in)
	}
}

func TestOpenRejects(t *testing.T) {
	f := drivertest.New(drivertest.Config{}, nil)
	tests := []struct {
		name string
		regs driver.Registers
		opts driver.Options
		want error
	}{
		{"no device", deadRegs{}, driver.Options{}, driver.ErrNoDevice},
		{"slots not power of two", f, driver.Options{Slots: 3}, driver.ErrInvalid},
		{"too many slots", f, driver.Options{Slots: 128}, driver.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := driver.Open(tt.regs, f, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Errorf("Open() = %v, want %v", err, tt.want)
			}
		})
	}
}

// deadRegs is a BAR nobody answers.
type deadRegs struct{}

func (deadRegs) Read32(uint32) uint32   { return 0xffffffff }
func (deadRegs) Write32(uint32, uint32) {}

// silentRegs identifies as a vGPU but never executes anything.
type silentRegs struct{ driver.Registers }

func (s silentRegs) Write32(off, v uint32) {
	if off != abi.RegRingTail {
		s.Registers.Write32(off, v)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	for _, n := range []int{1, 4095, 4096, 4097, 3<<20 + 123} {
		d, _ := open(t, drivertest.Config{Seed: uint64(n)}, driver.Options{StagingBytes: driver.MinStagingBytes, Slots: 8})
		data := make([]byte, n)
		r := rand.New(rand.NewPCG(uint64(n), 1))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		b, err := d.CreateBuffer(uint64(n) + 100)
		if err != nil {
			t.Fatalf("CreateBuffer(%d) = %v", n, err)
		}
		if err := d.Write(b, 100, data); err != nil {
			t.Fatalf("Write(%d bytes) = %v", n, err)
		}
		got := make([]byte, n)
		if err := d.Read(b, 100, got); err != nil {
			t.Fatalf("Read(%d bytes) = %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("Read after Write(%d bytes) differs", n)
		}
		if err := d.Finish(); err != nil {
			t.Errorf("Finish() = %v", err)
		}
	}
}

func TestBatchingOneDoorbell(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{})
	var bufs []driver.Buffer
	for i := 0; i < 20; i++ {
		b, err := d.CreateBuffer(4096)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if f.Buffers() != 0 {
		t.Errorf("device saw %d buffers before any doorbell, want 0", f.Buffers())
	}
	for _, b := range bufs {
		if err := d.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	st := d.Stats()
	if st.Doorbells != 1 || st.Commands != 41 || st.Completed != 41 {
		t.Errorf("Stats() = %+v, want 1 doorbell for 41 commands", st)
	}
}

func TestRingWraps(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{Slots: 4})
	for i := 0; i < 500; i++ {
		b, err := d.CreateBuffer(64)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	if f.Buffers() != 0 {
		t.Errorf("device has %d buffers after freeing all, want 0", f.Buffers())
	}
}

func TestBuildAndLaunch(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	p, _, err := d.Build(fillSrc, "-cl-std=CL1.2")
	if err != nil {
		t.Fatalf("Build() = %v", err)
	}
	b, _ := d.CreateBuffer(4 * 1000)
	if err := d.Launch(p, "fill", driver.Range1(1000, 0), driver.BufferArg(b), driver.Uint32Arg(7)); err != nil {
		t.Fatalf("Launch() = %v", err)
	}
	got := make([]byte, 4*1000)
	if err := d.Read(b, 0, got); err != nil {
		t.Fatalf("Read() = %v", err)
	}
	for i := 0; i < 1000; i++ {
		if v := uint32(got[4*i]) | uint32(got[4*i+1])<<8 | uint32(got[4*i+2])<<16 | uint32(got[4*i+3])<<24; v != 7+uint32(i) {
			t.Fatalf("out[%d] = %d, want %d", i, v, 7+i)
		}
	}
	if err := d.FreeProgram(p); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() = %v", err)
	}
}

func TestBuildFailure(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	_, log, err := d.Build("#error intentional\n__kernel void k() {}", "")
	if abi.StatusOf(err) != abi.StatusBuildFailed {
		t.Fatalf("Build(#error) = %v, want status build failed", err)
	}
	var ce *driver.CommandError
	if !errors.As(err, &ce) || ce.Opcode != abi.OpProgramBuild {
		t.Errorf("Build(#error) error %v is not a program-build CommandError", err)
	}
	if !bytes.Contains([]byte(log), []byte("error: intentional")) {
		t.Errorf("Build(#error) log = %q, want it to contain %q", log, "error: intentional")
	}
}

func TestDeferredError(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	p, _, err := d.Build(fillSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.CreateBuffer(16)
	d.Launch(p, "nosuch", driver.Range1(4, 0), driver.BufferArg(b))
	d.Launch(p, "fill", driver.Range1(4, 0), driver.BufferArg(driver.Buffer{Handle: 999}), driver.Uint32Arg(1))
	err = d.Finish()
	var ce *driver.CommandError
	if !errors.As(err, &ce) || ce.Opcode != abi.OpLaunch || ce.Status != abi.StatusNotFound || ce.Index != 2 {
		t.Fatalf("Finish() = %v, want not found from launch at index 2", err)
	}
	if !errors.Is(err, abi.StatusNotFound.Error()) {
		t.Errorf("errors.Is(%v, not found) = false", err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("second Finish() = %v, want nil (error reported once)", err)
	}
}

func TestRaw(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{Slots: 4})
	var idx []uint32
	for i := 0; i < 10; i++ { // more than the ring: earlier results are kept
		c := abi.Command{Opcode: 0x7777, Tag: uint64(100 + i)}
		n, err := d.SubmitRaw(c)
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, n)
	}
	d.RingDoorbell(d.Tail())
	for i, n := range idx {
		rec, err := d.WaitIndex(n)
		if err != nil || rec.Status != abi.StatusInvalidOpcode || rec.Tag != uint64(100+i) {
			t.Errorf("WaitIndex(%d) = %+v, %v, want invalid opcode tag %d", n, rec, err, 100+i)
		}
	}
	// A doorbell beyond the ring is reported in RegError; the ring keeps working.
	d.RingDoorbell(d.Tail() + 4 + 5)
	if s := d.AckError(); s != abi.StatusRingOverflow {
		t.Errorf("AckError() = %v, want ring overflow", s)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() after overflow = %v", err)
	}
}

func TestTimeout(t *testing.T) {
	f := drivertest.New(drivertest.Config{}, nil)
	d, err := driver.Open(silentRegs{f}, f, driver.Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); !errors.Is(err, driver.ErrTimeout) {
		t.Errorf("Finish() on a silent device = %v, want ErrTimeout", err)
	}
}

func TestClosed(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateBuffer(1); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("CreateBuffer after Close = %v, want ErrClosed", err)
	}
}

// TestFullRingSleepsItsProducer is the mechanism test of issue 43's "a
// burst never spins its producer": a submission that finds the ring full
// sleeps until a slot frees, and never yields the processor in a loop
// (which, on a small host, takes it from the device's processes that free
// the slot).
func TestFullRingSleepsItsProducer(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{StagingBytes: driver.MinStagingBytes, Timeout: time.Minute})
	f.Hold()
	for range d.Slots() {
		if err := d.Marker(nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	submitted := make(chan error, 1)
	go func() { submitted <- d.Marker(nil) }() // the ring is full: it waits
	deadline := time.Now().Add(time.Minute)
	for driver.RoomSleeps(d) == 0 {
		if time.Now().After(deadline) {
			f.Release()
			t.Fatal("the producer of a full ring never slept")
		}
		runtime.Gosched()
	}
	f.Release()
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	if st.RoomWaits == 0 || st.RoomSleeps == 0 || st.RoomYields != 0 {
		t.Errorf("room waits %d, sleeps %d, yields %d: want a wait that sleeps and never yields", st.RoomWaits, st.RoomSleeps, st.RoomYields)
	}
}
