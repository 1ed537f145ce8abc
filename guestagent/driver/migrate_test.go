package driver_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// model is the BAR0 of the device after a migration: the same state (the
// fake it wraps) behind another device model's identity. It records
// accesses made after Close.
type model struct {
	driver.Registers
	name     string // device name register; "" passes through
	cus      uint32 // compute units; 0 passes through
	id       uint32 // ID register; 0 passes through
	version  uint32 // version register; 0 passes through
	headSkew uint32 // added to RegRingHead

	closed  atomic.Bool
	touched atomic.Bool // accessed after Close

	// dark: the BAR is mapped but the VMM does not decode it (a
	// destination whose PCI configuration was reset): reads return all
	// ones, writes are lost and counted.
	dark       atomic.Bool
	darkWrites atomic.Int32
}

func (m *model) Read32(off uint32) uint32 {
	if m.closed.Load() {
		m.touched.Store(true)
		return 0xffffffff
	}
	if m.dark.Load() {
		return 0xffffffff
	}
	switch {
	case off == abi.RegID && m.id != 0:
		return m.id
	case off == abi.RegVersion && m.version != 0:
		return m.version
	case off == abi.RegComputeUnits && m.cus != 0:
		return m.cus
	case off == abi.RegRingHead:
		return m.Registers.Read32(off) + m.headSkew
	case m.name != "" && off >= abi.RegDeviceName && off < abi.RegDeviceName+abi.DeviceNameLen:
		var b [4]byte
		copy(b[:], m.name[min(int(off-abi.RegDeviceName), len(m.name)):])
		return binary.LittleEndian.Uint32(b[:])
	}
	return m.Registers.Read32(off)
}

func (m *model) Write32(off, v uint32) {
	if m.closed.Load() {
		m.touched.Store(true)
		return
	}
	if m.dark.Load() {
		m.darkWrites.Add(1)
		return
	}
	m.Registers.Write32(off, v)
}

func (m *model) Close() error {
	m.closed.Store(true)
	return nil
}

// stall holds doorbell writes while on, like a device that never
// completes; release delivers the last one.
type stall struct {
	driver.Registers
	mu   sync.Mutex
	on   bool
	held bool
	tail uint32
}

func (s *stall) Write32(off, v uint32) {
	s.mu.Lock()
	if off == abi.RegRingTail && s.on {
		s.tail, s.held = v, true
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.Registers.Write32(off, v)
}

func (s *stall) release() {
	s.mu.Lock()
	s.on = false
	held, tail := s.held, s.tail
	s.held = false
	s.mu.Unlock()
	if held {
		s.Registers.Write32(abi.RegRingTail, tail)
	}
}

func openModel(t *testing.T, opts driver.Options, kernels map[string]drivertest.KernelFunc) (*driver.Device, *drivertest.Device, *model) {
	t.Helper()
	if kernels == nil {
		kernels = map[string]drivertest.KernelFunc{"fill": fill}
	}
	f := drivertest.New(drivertest.Config{}, kernels)
	m := &model{Registers: f}
	d, err := driver.Open(m, f, opts)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, f, m
}

func suspend(t *testing.T, d *driver.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Suspend(ctx); err != nil {
		t.Fatalf("Suspend() = %v", err)
	}
	if !d.Suspended() {
		t.Fatalf("Suspended() = false after Suspend")
	}
}

func u32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// TestSuspendResume: work batched before Suspend completes during it; the
// registers are closed and untouched until Resume; after Resume on another
// device model the same handles work and the data is there.
func TestSuspendResume(t *testing.T) {
	d, f, m := openModel(t, driver.Options{}, nil)
	p, _, err := d.Build(fillSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("migrate!"), 512)
	a, _ := d.CreateBuffer(uint64(len(data)))
	b, _ := d.CreateBuffer(64 * 4)
	if err := d.Write(a, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "fill", driver.Range1(64, 0), driver.BufferArg(b), driver.Uint32Arg(100)); err != nil {
		t.Fatal(err)
	}
	// Nothing rung yet: Suspend rings and drains.
	if f.Buffers() != 0 || f.Launches != 0 {
		t.Fatalf("device ran commands before any doorbell")
	}
	suspend(t, d)
	if f.Buffers() != 2 || f.Launches != 1 {
		t.Errorf("after Suspend the device has %d buffers, %d launches; want 2, 1", f.Buffers(), f.Launches)
	}
	if !m.closed.Load() {
		t.Errorf("Suspend did not close the registers")
	}
	if err := d.Suspend(context.Background()); err != nil || !d.Suspended() {
		t.Errorf("second Suspend() = %v, suspended %v; want nil, true", err, d.Suspended())
	}

	m2 := &model{Registers: f, name: "Other GPU 9000", cus: 48}
	if err := d.Resume(m2); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	if m.touched.Load() {
		t.Errorf("the driver touched the closed registers")
	}
	if d.Suspended() {
		t.Errorf("Suspended() after Resume")
	}
	if in := d.Info(); in.Name != "Other GPU 9000" || in.ComputeUnits != 48 || in.Profile != "fake-1g" {
		t.Errorf("Info() after Resume = %+v, want the new model", in)
	}
	if d.Regs() != m2 {
		t.Errorf("Regs() after Resume is not the new registers")
	}
	got := make([]byte, len(data))
	if err := d.Read(a, 0, got); err != nil || !bytes.Equal(got, data) {
		t.Errorf("Read(a) after Resume = %v, data equal %v", err, bytes.Equal(got, data))
	}
	// The program built before runs again on the buffer created before.
	if err := d.Launch(p, "fill", driver.Range1(64, 0), driver.BufferArg(b), driver.Uint32Arg(7)); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 64*4)
	if err := d.Read(b, 0, out); err != nil {
		t.Fatalf("Read(b) = %v", err)
	}
	if v := u32s(out); v[0] != 7 || v[63] != 70 {
		t.Errorf("fill after Resume: out[0], out[63] = %d, %d, want 7, 70", v[0], v[63])
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() after Resume = %v", err)
	}
	if err := d.Resume(m2); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("Resume() of a running device = %v, want ErrInvalid", err)
	}
}

// TestSuspendMapped: a device suspended for a migration in place keeps
// its registers mapped and writes nothing to them while suspended;
// ResumeMapped refuses while BAR0 is dark (the destination's PCI
// configuration not restored yet) and leaves the device suspended, then
// continues on the same registers once it answers; Resume with other
// registers after SuspendMapped unmaps the kept ones.
func TestSuspendMapped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, f, m := openModel(t, driver.Options{}, nil)
	p, _, err := d.Build(fillSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.CreateBuffer(64 * 4)
	if err := d.Launch(p, "fill", driver.Range1(64, 0), driver.BufferArg(b), driver.Uint32Arg(3)); err != nil {
		t.Fatal(err)
	}
	if err := d.ResumeMapped(); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("ResumeMapped() of a running device = %v, want ErrInvalid", err)
	}
	if err := d.SuspendMapped(ctx); err != nil || !d.Suspended() {
		t.Fatalf("SuspendMapped() = %v, suspended %v", err, d.Suspended())
	}
	if f.Launches != 1 {
		t.Errorf("SuspendMapped left %d launches run, want the batched one drained", f.Launches)
	}
	if m.closed.Load() {
		t.Fatalf("SuspendMapped closed the registers")
	}

	// The VM moved; the destination's VMM does not decode BAR0 yet.
	m.dark.Store(true)
	done := make(chan error, 1)
	go func() { done <- d.Launch(p, "fill", driver.Range1(64, 0), driver.BufferArg(b), driver.Uint32Arg(5)) }()
	if err := d.ResumeMapped(); !errors.Is(err, driver.ErrNoDevice) || !d.Suspended() {
		t.Fatalf("ResumeMapped() on a dark BAR = %v, suspended %v; want ErrNoDevice, still suspended", err, d.Suspended())
	}
	m.dark.Store(false) // the agent wrote the configuration back
	if err := d.ResumeMapped(); err != nil {
		t.Fatalf("ResumeMapped() = %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Launch held across the migration = %v", err)
	}
	if n := m.darkWrites.Load(); n != 0 {
		t.Errorf("the driver wrote %d registers while BAR0 was dark", n)
	}
	if d.Suspended() || d.Regs() != m || m.closed.Load() {
		t.Errorf("after ResumeMapped: suspended %v, same registers %v, closed %v", d.Suspended(), d.Regs() == m, m.closed.Load())
	}
	out := make([]byte, 64*4)
	if err := d.Read(b, 0, out); err != nil || u32s(out)[1] != 6 {
		t.Errorf("Read(b) after ResumeMapped = %v, out[1] %d; want 6 (the launch held across it)", err, u32s(out)[1])
	}

	// A BAR that stays dark: the program reopens and resumes on new
	// registers, and the kept mapping goes.
	if err := d.SuspendMapped(ctx); err != nil {
		t.Fatal(err)
	}
	m.dark.Store(true)
	if err := d.ResumeMapped(); !errors.Is(err, driver.ErrNoDevice) {
		t.Fatalf("ResumeMapped() on a dark BAR = %v, want ErrNoDevice", err)
	}
	m2 := &model{Registers: f}
	if err := d.Resume(m2); err != nil {
		t.Fatalf("Resume() after SuspendMapped = %v", err)
	}
	if !m.closed.Load() || d.Regs() != m2 {
		t.Errorf("Resume(other) after SuspendMapped: kept registers closed %v, new ones in use %v", m.closed.Load(), d.Regs() == m2)
	}
	if err := d.ResumeMapped(); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("ResumeMapped() of a running device = %v, want ErrInvalid", err)
	}
}

// TestCallWhileSuspendedWaits: a call made while suspended blocks until
// Resume, then succeeds.
func TestCallWhileSuspendedWaits(t *testing.T) {
	d, f, _ := openModel(t, driver.Options{}, nil)
	b, _ := d.CreateBuffer(16)
	if err := d.Write(b, 0, []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	suspend(t, d)
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		got := make([]byte, 16)
		err := d.Read(b, 0, got)
		done <- result{got, err}
	}()
	finish := make(chan error, 1)
	go func() { finish <- d.Finish() }()
	select {
	case r := <-done:
		t.Fatalf("Read() while suspended returned %v", r.err)
	case err := <-finish:
		t.Fatalf("Finish() while suspended returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := d.Resume(&model{Registers: f}); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	if r := <-done; r.err != nil || string(r.data) != "0123456789abcdef" {
		t.Errorf("Read() across Resume = %q, %v", r.data, r.err)
	}
	if err := <-finish; err != nil {
		t.Errorf("Finish() across Resume = %v", err)
	}
}

// TestSuspendedTimeout: a call waits at most Options.Timeout for Resume.
func TestSuspendedTimeout(t *testing.T) {
	d, f, _ := openModel(t, driver.Options{Timeout: 30 * time.Millisecond}, nil)
	suspend(t, d)
	start := time.Now()
	if err := d.Finish(); !errors.Is(err, driver.ErrSuspended) {
		t.Errorf("Finish() while suspended = %v, want ErrSuspended", err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Errorf("Finish() gave up after %v, before the timeout", el)
	}
	if s := d.AckError(); s != abi.StatusDeviceError {
		t.Errorf("AckError() while suspended = %v, want device error", s)
	}
	if err := d.Resume(&model{Registers: f}); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() after Resume = %v", err)
	}
}

// callInProgress opens a device whose kernel runs until release is
// closed, launches it and waits in Finish (its result on finish) until
// the kernel runs.
func callInProgress(t *testing.T) (d *driver.Device, f *drivertest.Device, release chan struct{}, finish chan error) {
	t.Helper()
	entered := make(chan struct{})
	release = make(chan struct{})
	d, f, _ = openModel(t, driver.Options{}, map[string]drivertest.KernelFunc{
		"slow": func(*abi.LaunchDesc, func(uint32) []byte) error {
			close(entered)
			<-release
			return nil
		},
	})
	p, _, err := d.Build("__kernel void slow() {}", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "slow", driver.Range1(1, 0)); err != nil {
		t.Fatal(err)
	}
	finish = make(chan error, 1)
	go func() { finish <- d.Finish() }()
	<-entered
	return d, f, release, finish
}

// TestSuspendWaitsForCallInProgress: Suspend waits for a call that holds
// the device (here a kernel still running) and then drains.
func TestSuspendWaitsForCallInProgress(t *testing.T) {
	d, f, release, finish := callInProgress(t)
	susp := make(chan error, 1)
	go func() { susp <- d.Suspend(context.Background()) }()
	select {
	case err := <-susp:
		t.Fatalf("Suspend() returned %v while a call was in progress", err)
	case <-time.After(30 * time.Millisecond):
	}
	close(release)
	if err := <-finish; err != nil {
		t.Errorf("Finish() in progress = %v", err)
	}
	if err := <-susp; err != nil {
		t.Fatalf("Suspend() = %v", err)
	}
	if err := d.Resume(&model{Registers: f}); err != nil {
		t.Fatal(err)
	}
}

// TestSuspendNeverCompletes: a device that does not complete makes
// Suspend return ctx's error, and the device stays usable.
func TestSuspendNeverCompletes(t *testing.T) {
	f := drivertest.New(drivertest.Config{}, nil)
	s := &stall{Registers: f}
	d, err := driver.Open(s, f, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s.mu.Lock()
	s.on = true
	s.mu.Unlock()
	if _, err := d.CreateBuffer(64); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := d.Suspend(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Suspend() on a stalled device = %v, want context.DeadlineExceeded", err)
	}
	if d.Suspended() {
		t.Fatalf("Suspended() after a failed Suspend")
	}
	s.release()
	b, err := d.CreateBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() after a failed Suspend = %v", err)
	}
	if f.Buffers() != 2 {
		t.Errorf("device has %d buffers, want 2", f.Buffers())
	}
}

// TestSuspendCancelledWhileCallInProgress: Suspend gives up waiting for a
// call in progress when ctx ends; calls proceed.
func TestSuspendCancelledWhileCallInProgress(t *testing.T) {
	d, _, release, finish := callInProgress(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := d.Suspend(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Suspend() = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	if err := <-finish; err != nil {
		t.Errorf("Finish() = %v", err)
	}
	if _, err := d.CreateBuffer(8); err != nil {
		t.Errorf("CreateBuffer() after a cancelled Suspend = %v", err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() = %v", err)
	}
}

// TestResumeRejects: Resume checks the identity, the version and the
// restored ring; a failed Resume leaves the device suspended.
func TestResumeRejects(t *testing.T) {
	d, f, _ := openModel(t, driver.Options{}, nil)
	b, _ := d.CreateBuffer(8)
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	suspend(t, d)
	for _, tc := range []struct {
		name string
		regs driver.Registers
		want error
	}{
		{"no device", deadRegs{}, driver.ErrNoDevice},
		{"wrong id", &model{Registers: f, id: 0x12345678}, driver.ErrNoDevice},
		{"wrong major", &model{Registers: f, version: (abi.VersionMajor + 1) << 16}, driver.ErrVersion},
		{"ring head moved", &model{Registers: f, headSkew: 1}, driver.ErrProtocol},
	} {
		if err := d.Resume(tc.regs); !errors.Is(err, tc.want) {
			t.Errorf("%s: Resume() = %v, want %v", tc.name, err, tc.want)
		}
		if !d.Suspended() {
			t.Fatalf("%s: a failed Resume resumed the device", tc.name)
		}
	}
	// A device whose ring was not restored (reset: disabled, positions 0).
	fresh := drivertest.New(drivertest.Config{}, nil)
	if err := d.Resume(fresh); !errors.Is(err, driver.ErrProtocol) {
		t.Errorf("Resume(fresh device) = %v, want ErrProtocol", err)
	}
	if err := d.Resume(f); err != nil {
		t.Fatalf("Resume(restored) = %v", err)
	}
	if err := d.Write(b, 0, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() = %v", err)
	}
}

// TestCloseWhileSuspended: Close does not touch the closed registers and
// wakes the waiting calls with ErrClosed.
func TestCloseWhileSuspended(t *testing.T) {
	d, _, m := openModel(t, driver.Options{}, nil)
	suspend(t, d)
	errc := make(chan error, 1)
	go func() {
		_, err := d.CreateBuffer(8)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := d.Close(); err != nil {
		t.Errorf("Close() while suspended = %v", err)
	}
	if err := <-errc; !errors.Is(err, driver.ErrClosed) {
		t.Errorf("CreateBuffer() waiting across Close = %v, want ErrClosed", err)
	}
	if m.touched.Load() {
		t.Errorf("Close touched the closed registers")
	}
	if err := d.Resume(m); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Resume() after Close = %v, want ErrClosed", err)
	}
}

// TestSuspendResumeConcurrent: calls from several goroutines across
// repeated Suspend/Resume cycles all succeed (run with -race).
func TestSuspendResumeConcurrent(t *testing.T) {
	d, f, _ := openModel(t, driver.Options{Slots: 4}, nil)
	p, _, err := d.Build(fillSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := d.CreateBuffer(16 * 4)
			if err != nil {
				errs <- err
				return
			}
			out := make([]byte, 16*4)
			for k := uint32(0); ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				v := uint32(w)<<24 | k
				if err := d.Launch(p, "fill", driver.Range1(16, 0), driver.BufferArg(b), driver.Uint32Arg(v)); err != nil {
					errs <- err
					return
				}
				if err := d.Read(b, 0, out); err != nil {
					errs <- err
					return
				}
				if got := u32s(out); got[0] != v || got[15] != v+15 {
					errs <- errors.New("wrong data after a migration")
					return
				}
				_ = d.Info()
			}
		}()
	}
	for i := range 20 {
		time.Sleep(time.Millisecond)
		suspend(t, d)
		if err := d.Resume(&model{Registers: f, cus: uint32(i + 1)}); err != nil {
			t.Fatalf("Resume() = %v", err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := d.Finish(); err != nil {
		t.Error(err)
	}
}

// TestAbandon: a device whose state is gone (the host's vgpud restarted)
// fails the wait in progress and every later call with ErrDeviceLost,
// counting the commands lost; Close touches nothing; a new Open on the
// replacement works.
func TestAbandon(t *testing.T) {
	f := drivertest.New(drivertest.Config{}, nil)
	s := &stall{Registers: f}
	d, err := driver.Open(s, f, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.on = true // the old device never completes again
	s.mu.Unlock()
	if _, err := d.CreateBuffer(64); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- d.Finish() }()
	d.Abandon()
	err = <-waiting
	if !errors.Is(err, driver.ErrDeviceLost) || !strings.Contains(err.Error(), "1 commands in flight") {
		t.Fatalf("Finish() on an abandoned device = %v, want ErrDeviceLost counting 1 command", err)
	}
	if _, err := d.CreateBuffer(64); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("CreateBuffer() after Abandon = %v, want ErrDeviceLost", err)
	}
	d.Abandon() // again: nothing
	if err := d.Close(); err != nil {
		t.Errorf("Close() of an abandoned device = %v", err)
	}
	// The replacement: a fresh device at the same place.
	f2 := drivertest.New(drivertest.Config{}, nil)
	d2, err := driver.Open(f2, f2, driver.Options{})
	if err != nil {
		t.Fatalf("Open() of the replacement = %v", err)
	}
	defer d2.Close()
	if _, err := d2.CreateBuffer(64); err != nil || d2.Finish() != nil {
		t.Errorf("the replacement does not work: %v", err)
	}
}

// TestAbandonWhileSuspended: a program quiesced for a migration whose
// device comes back without its state: the calls waiting for Resume fail
// with ErrDeviceLost instead of waiting their timeout.
func TestAbandonWhileSuspended(t *testing.T) {
	d, _, _ := openModel(t, driver.Options{Timeout: time.Minute}, nil)
	suspend(t, d)
	waiting := make(chan error, 1)
	go func() {
		_, err := d.CreateBuffer(64)
		waiting <- err
	}()
	d.Abandon()
	if err := <-waiting; !errors.Is(err, driver.ErrDeviceLost) {
		t.Fatalf("a call waiting for Resume when the device was abandoned = %v, want ErrDeviceLost", err)
	}
}
