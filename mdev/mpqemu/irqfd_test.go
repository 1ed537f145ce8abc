package mpqemu_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/irqfd/irqfdtest"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

// drainPipe empties a pipe (unblocking a writer) until it is closed.
func drainPipe(fd int) {
	unix.SetNonblock(fd, false)
	buf := make([]byte, 1<<16)
	for {
		if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
			return
		}
	}
}

// raiseLevel makes the device's interrupt level high, so that attaching
// an irqfd asserts it at once.
func raiseLevel(d *device) {
	d.dev.WriteBAR(abi.RegIntEnable, 4, abi.IntCompletion)
	d.dev.INTx().Signal(abi.IntCompletion)
}

// A hostile QEMU that sends a full, blocking pipe (or a file) as the
// irqfd or the resample fd of SET_IRQFD: the Conn refuses it with an
// error naming the fd, ends the connection, and nothing blocks, though
// the device's level is high (an accepted irqfd is written at once).
func TestSetIRQFDRefusesNonEventfd(t *testing.T) {
	tests := []struct {
		name     string
		irq, res func(t *testing.T) (fd int, unblock func())
	}{
		{"full pipe as irqfd", pipeFD, eventfdFD},
		{"full pipe as resample fd", eventfdFD, pipeFD},
		{"memfd as irqfd", memfdFD, eventfdFD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peer, devSide := pipe(t)
			d := serve(t, context.Background(), devSide)
			raiseLevel(d)
			irq, unblockIRQ := tc.irq(t)
			res, unblockRes := tc.res(t)
			if err := mpqemu.WriteMsg(peer, mpqemu.Msg{Cmd: mpqemu.CmdSetIRQFD, FDs: []int{irq, res}}); err != nil {
				t.Fatalf("send SET_IRQFD: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
			defer cancel()
			select {
			case err := <-d.done:
				if !errors.Is(err, mpqemu.ErrProtocol) || !strings.Contains(err.Error(), "not an eventfd") {
					t.Errorf("Serve() = %v, want ErrProtocol naming the fd that is not an eventfd", err)
				}
				d.done <- err
			case <-ctx.Done():
				unblockIRQ()
				unblockRes()
				t.Fatalf("Serve did not end within %v of a SET_IRQFD with a non-eventfd (blocked writing it?)", irqfdtest.Patience)
			}
			if r, _ := d.dev.INTx().Raised(); r != 0 {
				t.Errorf("INTx raised %d times through a refused fd, want 0", r)
			}
		})
	}
}

func pipeFD(t *testing.T) (int, func()) {
	r, w := irqfdtest.FullPipe(t)
	return w, func() { go drainPipe(r) }
}

func eventfdFD(t *testing.T) (int, func()) { return irqfdtest.Eventfd(t, 0), func() {} }

func memfdFD(t *testing.T) (int, func()) { return memfd(t, 4096), func() {} }

// An irqfd whose counter is at its maximum, blocking (a hostile QEMU
// keeps it there): raising the interrupt does not block the device or
// its lock, and closing the connection (what destroying the instance
// does) returns.
func TestIRQFDFullCounterDoesNotBlock(t *testing.T) {
	peer, devSide := pipe(t)
	d := serve(t, context.Background(), devSide)
	irq, res := irqfdtest.Eventfd(t, 0), irqfdtest.Eventfd(t, 0)
	irqfdtest.Add(t, irq, irqfdtest.CounterMax)
	var b [8]byte
	if err := mpqemu.WriteMsg(peer, mpqemu.Msg{Cmd: mpqemu.CmdSetIRQFD, FDs: []int{irq, res}}); err != nil {
		t.Fatalf("send SET_IRQFD: %v", err)
	}
	// A config read's reply says SET_IRQFD (sent before it) was applied.
	cfg := mpqemu.ConfigMsg{Addr: 0, Len: 4}
	if _, err := call(peer, mpqemu.Msg{Cmd: mpqemu.CmdPCICfgRead, Payload: cfg.Marshal()}); err != nil {
		t.Fatalf("config read after SET_IRQFD: %v", err)
	}
	// The peer clears O_NONBLOCK again, as a hostile QEMU may: the file
	// is shared.
	if _, err := unix.FcntlInt(uintptr(irq), unix.F_SETFL, 0); err != nil {
		t.Fatal(err)
	}
	unblock := func() { unix.Read(irq, b[:]) } // empties the counter: a blocked write goes on
	wait := func(what string, f func()) { t.Helper(); irqfdtest.Returns(t, what, f, unblock) }
	wait("raising INTx", func() {
		raiseLevel(d)
		for range 3 {
			d.dev.INTx().Resample() // the line is high: asserted again
		}
	})
	// The device and its lock stay usable by everyone else.
	wait("a register read", func() { d.dev.ReadBAR(abi.RegIntStatus, 4) })
	wait("Close", func() { d.conn.Close() })
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(irqfdtest.Patience):
		unblock()
		t.Fatalf("Serve did not return within %v of Close", irqfdtest.Patience)
	}
	if _, f := d.dev.INTx().Raised(); f != 0 {
		t.Errorf("Raised() failures = %d, want 0 (a full counter is an interrupt pending)", f)
	}
	if _, err := unix.Read(irq, b[:]); err != nil || binary.NativeEndian.Uint64(b[:]) != irqfdtest.CounterMax {
		t.Errorf("irqfd counter = %#x, %v, want %#x: nothing added to a full counter", binary.NativeEndian.Uint64(b[:]), err, uint64(irqfdtest.CounterMax))
	}
}

// call sends m and reads the reply.
func call(conn *net.UnixConn, m mpqemu.Msg) (mpqemu.Msg, error) {
	if err := mpqemu.WriteMsg(conn, m); err != nil {
		return mpqemu.Msg{}, err
	}
	return mpqemu.ReadMsg(conn)
}
