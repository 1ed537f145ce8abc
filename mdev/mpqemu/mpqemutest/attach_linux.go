package mpqemutest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mmio"
)

// Pipe returns the two ends of a Unix stream socketpair, as QEMU gets its
// end through `fd=N`.
func Pipe() (vmSide, devSide *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	a, err := scmrights.UnixConn(fds[0], "mpqemu-vm")
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	b, err := scmrights.UnixConn(fds[1], "mpqemu-dev")
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// Attach serves dev, cs and mem with an mpqemu.Conn on one end of a
// socketpair and attaches a new VM with ramBytes of RAM to the other.
// stop closes the VM, waits for Serve to end and returns its error (nil
// after the clean hang-up); calling it again returns the same. The caller
// still owns mem.
func Attach(dev *mmio.Device, cs *mmio.ConfigSpace, mem *guestmem.Map, ramBytes uint64) (vm *VM, stop func() error, err error) {
	vmSide, devSide, err := Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	c := mpqemu.NewConn(devSide, dev, cs, mem, nil)
	done := make(chan error, 1)
	go func() { done <- c.Serve(context.Background()) }()
	vm, err = NewVM(vmSide, ramBytes)
	if err != nil {
		c.Close()
		serr := <-done
		if errors.Is(serr, mpqemu.ErrClosed) {
			serr = nil
		}
		return nil, nil, errors.Join(fmt.Errorf("attach: %w", err), serr)
	}
	stop = sync.OnceValue(func() error {
		vm.Close()
		return <-done
	})
	return vm, stop, nil
}
