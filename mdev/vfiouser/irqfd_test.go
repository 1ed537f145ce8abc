package vfiouser_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/irqfd/irqfdtest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// within sends one command from another goroutine and waits up to
// irqfdtest.Patience for its reply; on timeout it calls unblock, waits
// for the reply after all, and fails the test.
func (p *rawPeer) within(what string, cmd vfiouser.Cmd, fds []int, payload []byte, unblock func()) vfiouser.Msg {
	p.t.Helper()
	p.id++
	id := p.id
	type result struct {
		m   vfiouser.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		if err := p.w.Write(vfiouser.Header{ID: id, Cmd: cmd}, fds, payload); err != nil {
			done <- result{err: err}
			return
		}
		m, err := p.w.Read()
		m.Payload = append([]byte(nil), m.Payload...)
		done <- result{m, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
	defer cancel()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		unblock()
		<-done
		p.t.Fatalf("%s: no reply within %v (blocked writing the interrupt fd?)", what, irqfdtest.Patience)
	}
	if r.err != nil {
		p.t.Fatalf("%s: %v", what, r.err)
	}
	if r.m.ID != id || r.m.Cmd != cmd {
		p.t.Fatalf("%s: reply %+v, want a reply to %v id %d", what, r.m.Header, cmd, id)
	}
	return r.m
}

func irqSet(flags uint32) []byte {
	return vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: flags, Index: vfiouser.IRQIntx, Count: 1}.Marshal()
}

// raiseLevel makes the device's interrupt level high, so that attaching
// a trigger asserts it at once.
func raiseLevel(p *rawPeer) {
	p.s.regs.WriteBAR(abi.RegIntEnable, 4, abi.IntCompletion)
	p.s.regs.INTx().Signal(abi.IntCompletion)
}

// A hostile client that sends a full, blocking pipe (or a file) as
// INTx's trigger or unmask fd: SET_IRQS fails with EINVAL, nothing
// blocks though the level is high, and the session goes on serving.
func TestSetIRQsRefusesNonEventfd(t *testing.T) {
	trigger := uint32(vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger)
	unmask := uint32(vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionUnmask)
	tests := []struct {
		name  string
		flags uint32
		fd    func(t *testing.T) (fd int, unblock func())
	}{
		{"full pipe as trigger", trigger, pipeFD},
		{"full pipe as unmask fd", unmask, pipeFD},
		{"memfd as trigger", trigger, memfdFD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newRaw(t)
			raiseLevel(p)
			fd, unblock := tc.fd(t)
			m := p.within("SET_IRQS", vfiouser.CmdDeviceSetIRQs, []int{fd}, irqSet(tc.flags), unblock)
			if m.Flags&vfiouser.FlagError == 0 || unix.Errno(m.Error) != unix.EINVAL {
				t.Errorf("SET_IRQS with a %s: reply %+v, want error EINVAL", tc.name, m.Header)
			}
			if r, _ := p.s.regs.INTx().Raised(); r != 0 {
				t.Errorf("INTx raised %d times through a refused fd, want 0", r)
			}
			// The session still serves: an eventfd is accepted after.
			efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(efd)
			p.ok(vfiouser.CmdDeviceSetIRQs, []int{efd}, irqSet(tc.flags))
		})
	}
}

func pipeFD(t *testing.T) (int, func()) {
	r, w := irqfdtest.FullPipe(t)
	return w, func() {
		unix.SetNonblock(r, true)
		buf := make([]byte, 1<<16)
		for {
			if n, err := unix.Read(r, buf); n <= 0 || err != nil {
				return
			}
		}
	}
}

func memfdFD(t *testing.T) (int, func()) {
	fd, err := unix.MemfdCreate("vfiouser-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd, func() {}
}

// A trigger eventfd whose counter is at its maximum, blocking (a hostile
// client keeps it there): raising INTx, unmasking it and closing the
// session (what destroying the instance does) all return.
func TestINTxFullCounterDoesNotBlock(t *testing.T) {
	p := newRaw(t)
	efd := irqfdtest.Eventfd(t, 0)
	irqfdtest.Add(t, efd, irqfdtest.CounterMax)
	var b [8]byte
	p.ok(vfiouser.CmdDeviceSetIRQs, []int{efd}, irqSet(vfiouser.IRQSetDataEventfd|vfiouser.IRQSetActionTrigger))
	// The client clears O_NONBLOCK again, as a hostile one may: the
	// file is shared.
	if _, err := unix.FcntlInt(uintptr(efd), unix.F_SETFL, 0); err != nil {
		t.Fatal(err)
	}
	unblock := func() { unix.Read(efd, b[:]) } // empties the counter: a blocked write goes on
	wait := func(what string, f func()) { t.Helper(); irqfdtest.Returns(t, what, f, unblock) }
	wait("raising INTx", func() { raiseLevel(p) })
	for range 3 { // each unmask asserts the line again: it is still high
		m := p.within("SET_IRQS unmask", vfiouser.CmdDeviceSetIRQs, nil, irqSet(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionUnmask), unblock)
		if m.Flags&vfiouser.FlagError != 0 {
			t.Fatalf("SET_IRQS unmask: error reply %v", unix.Errno(m.Error))
		}
	}
	wait("Close", func() { p.s.sess.Close() })
	select {
	case err := <-p.s.done:
		p.s.done <- err
	case <-time.After(irqfdtest.Patience):
		unblock()
		t.Fatalf("Serve did not return within %v of Close", irqfdtest.Patience)
	}
	if _, f := p.s.regs.INTx().Raised(); f != 0 {
		t.Errorf("Raised() failures = %d, want 0 (a full counter is an interrupt pending)", f)
	}
	// A write may have been under way at Close, which then read the
	// counter to let it end and the Trigger writes it back as it ends:
	// wait for the counter to be readable, not for it to be now.
	pfd := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(irqfdtest.Patience.Milliseconds()))
	for errors.Is(err, unix.EINTR) {
		n, err = unix.Poll(pfd, int(irqfdtest.Patience.Milliseconds()))
	}
	if n != 1 || err != nil {
		t.Fatalf("trigger counter not readable within %v: %d, %v", irqfdtest.Patience, n, err)
	}
	// The interrupt stays pending: the counter holds what Close read
	// (CounterMax, written back), or, where the blocked write went on
	// after that read and refilled the counter first, that write's 1
	// (the write back then meets a counter not empty: irqfd's restore).
	if _, err := unix.Read(efd, b[:]); err != nil || binary.NativeEndian.Uint64(b[:]) == 0 {
		t.Errorf("trigger counter = %#x, %v, want an interrupt pending (nonzero)", binary.NativeEndian.Uint64(b[:]), err)
	}
}
