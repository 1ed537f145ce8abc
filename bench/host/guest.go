package host

import (
	"errors"
	"runtime"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

// WaitLast flushes d and waits for its last command, then finishes d. It
// polls in short sleeps: the driver's own poll backs off to 1 ms sleeps,
// which would quantise every short kernel and latency measured, and
// spinning would steal the CPU that PoCL computes on.
func WaitLast(d *driver.Device) error {
	if err := d.Flush(); err != nil {
		return err
	}
	idx := d.Tail() - 1
	for i := 0; ; i++ {
		if _, ok := d.Completion(idx); ok {
			break
		}
		if i < 20 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return d.Finish()
}

// Guest is a QEMU-less VM (mpqemutest) on an instance's socket with the
// guest driver open on it and one program built: what the benchmarks'
// guests run their work in.
type Guest struct {
	VM   *mpqemutest.VM
	D    *driver.Device
	Prog driver.Program
}

// Open dials socket with a VM of ramBytes of guest RAM, opens the driver
// on it and builds source. On error, what it opened stays in g for Close.
func (g *Guest) Open(socket string, ramBytes uint64, source string) error {
	var err error
	if g.VM, err = mpqemutest.Dial(socket, ramBytes); err != nil {
		return err
	}
	if g.D, err = driver.Open(g.VM, g.VM, driver.Options{}); err != nil {
		return err
	}
	g.Prog, _, err = g.D.Build(source, "")
	return err
}

// Close closes the driver and the VM, those that Open opened.
func (g *Guest) Close() error {
	var errs []error
	if g.D != nil {
		errs = append(errs, g.D.Close())
	}
	if g.VM != nil {
		errs = append(errs, g.VM.Close())
	}
	return errors.Join(errs...)
}
