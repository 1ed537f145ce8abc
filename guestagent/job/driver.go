package job

import (
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// DriverDevice runs the job through the guest driver library: in a guest
// (vgpu-bench) or on the QEMU-less harness.
type DriverDevice struct {
	d    *driver.Device
	prog driver.Program
	bufs []driver.Buffer
}

var _ Device = (*DriverDevice)(nil)

// NewDriverDevice adapts an open driver. It does not close it; Free
// releases what the job created.
func NewDriverDevice(d *driver.Device) *DriverDevice { return &DriverDevice{d: d} }

// Build implements Device.
func (dd *DriverDevice) Build(source, options string) error {
	p, log, err := dd.d.Build(source, options)
	if err != nil {
		return fmt.Errorf("%w (log: %q)", err, log)
	}
	dd.prog = p
	return nil
}

// Alloc implements Device (batched; failures show at the next wait).
func (dd *DriverDevice) Alloc(size uint64) (Buf, error) {
	b, err := dd.d.CreateBuffer(size)
	if err != nil {
		return 0, err
	}
	dd.bufs = append(dd.bufs, b)
	return Buf(len(dd.bufs) - 1), nil
}

func (dd *DriverDevice) buf(b Buf) (driver.Buffer, error) {
	if b < 0 || int(b) >= len(dd.bufs) {
		return driver.Buffer{}, fmt.Errorf("buffer %d: have %d", b, len(dd.bufs))
	}
	return dd.bufs[b], nil
}

// Write implements Device.
func (dd *DriverDevice) Write(b Buf, p []byte) error {
	db, err := dd.buf(b)
	if err != nil {
		return err
	}
	return dd.d.Write(db, 0, p)
}

// Read implements Device.
func (dd *DriverDevice) Read(b Buf, p []byte) error {
	db, err := dd.buf(b)
	if err != nil {
		return err
	}
	return dd.d.Read(db, 0, p)
}

// MatMul implements Device: it submits the launch and a fence, waits for
// the fence and reads the launch's completion record, whose detail is the
// kernel's device time.
func (dd *DriverDevice) MatMul(a, b, c Buf, n, local int) (time.Duration, error) {
	var db [3]driver.Buffer
	for i, x := range []Buf{a, b, c} {
		var err error
		if db[i], err = dd.buf(x); err != nil {
			return 0, err
		}
	}
	err := dd.d.Launch(dd.prog, Kernel, driver.Range2(uint64(n), uint64(n), uint64(local), uint64(local)),
		driver.BufferArg(db[0]), driver.BufferArg(db[1]), driver.BufferArg(db[2]), driver.Uint32Arg(uint32(n)))
	if err != nil {
		return 0, err
	}
	idx := dd.d.Tail() - 1
	v, err := dd.d.Fence()
	if err != nil {
		return 0, err
	}
	if err := dd.d.WaitFence(v); err != nil {
		return 0, err
	}
	rec, ok := dd.d.Completion(idx)
	if !ok {
		// Already reaped by the driver (a full ring): the time is lost,
		// a failure is not (Finish reports it).
		return -1, nil
	}
	if rec.Status != abi.StatusOK {
		return 0, abi.Errorf(rec.Status, "launch (command %d) completed with %v", idx, rec.Status)
	}
	return time.Duration(rec.Detail), nil
}

// Finish implements Device.
func (dd *DriverDevice) Finish() error { return dd.d.Finish() }

// Free releases the job's buffers and program and waits for the device.
func (dd *DriverDevice) Free() error {
	for _, b := range dd.bufs {
		if err := dd.d.Free(b); err != nil {
			return err
		}
	}
	dd.bufs = nil
	if dd.prog.Handle != 0 {
		if err := dd.d.FreeProgram(dd.prog); err != nil {
			return err
		}
		dd.prog = driver.Program{}
	}
	return dd.d.Finish()
}
