package main

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/icdproto"
	"github.com/vgpud/vgpud/guestagent/icdserver"
)

// icdClient is one ICD protocol connection of a test.
type icdClient struct {
	t     *testing.T
	c     *net.UnixConn
	id    uint64
	arena []byte
	// deadline bounds every reply: a reply that does not come fails the
	// test instead of hanging it.
	deadline time.Time
}

func (cl *icdClient) send(op icdproto.Op, body any, fds ...int) {
	cl.t.Helper()
	cl.id++
	b, err := icdproto.Marshal(op, cl.id, body)
	if err != nil {
		cl.t.Fatal(err)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := cl.c.WriteMsgUnix(b, oob, nil); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *icdClient) call(op icdproto.Op, body any, fds ...int) any {
	cl.t.Helper()
	cl.send(op, body, fds...)
	buf := make([]byte, icdproto.MaxMessage)
	cl.c.SetReadDeadline(cl.deadline)
	n, err := cl.c.Read(buf)
	if err != nil {
		cl.t.Fatalf("%v: no reply: %v", op, err)
	}
	_, r, err := icdproto.Unmarshal(buf[:n])
	if err != nil {
		cl.t.Fatal(err)
	}
	if e, ok := r.(*icdproto.Error); ok {
		cl.t.Fatalf("%v: daemon error %v: %s", op, e.Code, e.Message)
	}
	return r
}

// connect serves a new connection on srv, says hello and attaches a 1 MiB
// arena.
func connect(t *testing.T, srv *icdserver.Server, deadline time.Time) *icdClient {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conv(fds[0]), conv(fds[1])
	t.Cleanup(func() { a.Close() })
	if !srv.ServeConn(b) {
		t.Fatal("ServeConn refused")
	}
	cl := &icdClient{t: t, c: a, deadline: deadline}
	cl.call(icdproto.OpHello, &icdproto.Hello{Version: icdproto.Version})
	const size = 1 << 20
	fd, arena := newArena(t, size)
	defer unix.Close(fd)
	cl.arena = arena
	t.Cleanup(func() { unix.Munmap(cl.arena) })
	if r := cl.call(icdproto.OpAttach, &icdproto.Attach{Arena: 1, Size: size}, fd).(*icdproto.AttachReply); r.Status != 0 {
		t.Fatalf("attach status %d", r.Status)
	}
	return cl
}

func (cl *icdClient) build(prog uint32, src string) {
	cl.t.Helper()
	copy(cl.arena, src)
	br := cl.call(icdproto.OpBuild, &icdproto.Build{Program: prog, Arena: 1, SrcLen: uint32(len(src)), OutOffset: 1 << 19, OutCap: 1 << 16}).(*icdproto.BuildReply)
	if br.Status != 0 {
		cl.t.Fatalf("build: %v: %s", abi.Status(br.Status), cl.arena[1<<19:1<<19+br.LogLen])
	}
}

func (cl *icdClient) wait(events ...uint64) []icdproto.EventRecord {
	cl.t.Helper()
	return cl.call(icdproto.OpWait, &icdproto.Wait{Events: events}).(*icdproto.WaitReply).Events
}

// vadd runs the vadd kernel (built as program 1) over buffers a, b of n
// words and checks the result against the CPU.
func (cl *icdClient) vadd(a, b uint32, k uint32, ev uint64) {
	cl.t.Helper()
	const n = 4096
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(cl.arena[65536+4*i:], uint32(5*i))
	}
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: a, Size: 4 * n, Event: ev})
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: b, Size: 4 * n, Event: ev + 1})
	cl.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: a, Arena: 1, ArenaOffset: 65536, Length: 4 * n, Event: ev + 2})
	l := &icdproto.Launch{LaunchHead: icdproto.LaunchHead{Program: 1, WorkDim: 1, GlobalSize: [3]uint64{n}, Event: ev + 3},
		Args: []icdproto.LaunchArg{{Kind: abi.ArgBuffer, Value: uint64(a)}, {Kind: abi.ArgBuffer, Value: uint64(b)}, {Kind: abi.ArgScalar, Size: 4, Value: uint64(k)}}}
	l.SetKernel("vadd")
	cl.send(icdproto.OpLaunch, l)
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: b, Arena: 1, ArenaOffset: 131072, Length: 4 * n, Event: ev + 4})
	for _, r := range cl.wait(ev, ev+1, ev+2, ev+3, ev+4) {
		if r.Status != 0 {
			cl.t.Fatalf("event %d: status %v", r.Event, abi.Status(r.Status))
		}
	}
	for i := 0; i < n; i++ {
		if got, want := binary.LittleEndian.Uint32(cl.arena[131072+4*i:]), uint32(5*i)+k; got != want {
			cl.t.Fatalf("element %d = %d, want %d", i, got, want)
		}
	}
}

// TestWorkerKilledMidKernel runs vgpu-icdd's server over an in-process
// vgpud whose worker is killed while a client's kernel (a loop that never
// ends) holds the device, as the watchdog kills one that overruns its
// turn. The waiting client's Wait must answer with the launch failed
// (StatusDeviceLost, which the ICD reports as a negative execution status)
// instead of never completing it, and a new client must then compute
// correctly on the reopened device.
func TestWorkerKilledMidKernel(t *testing.T) {
	// The server's Wait gives up after 30 s and answers "not complete",
	// which a client (the ICD) meets by waiting again, for ever: the test
	// fails on that answer, and on no answer within its deadline.
	h := newICDHost(t, hostOptions{RAM: 64 << 20, Wait: 30 * time.Second, Deadline: 4 * time.Minute})
	m, inst, srv, deadline := h.m, h.inst, h.srv, h.deadline
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	a := connect(t, srv, deadline)
	a.build(1, `__kernel void hold(__global volatile int *o) { while (o[1] == 0) { o[0]++; } }`)
	a.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 64, Event: 1})
	a.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 0, Length: 64, Event: 2})
	a.send(icdproto.OpFlush, &icdproto.Flush{})
	// The write takes a device turn too: only once it completed is the
	// instance's turn the kernel's (under load the kill once came during
	// the write's turn, and the write was lost with the kernel).
	for _, r := range a.wait(1, 2) {
		if r.Status != 0 {
			t.Fatalf("event %d before the kernel: status %v, want OK", r.Event, abi.Status(r.Status))
		}
	}
	l := &icdproto.Launch{LaunchHead: icdproto.LaunchHead{Program: 1, WorkDim: 1, GlobalSize: [3]uint64{1}, Event: 3},
		Args: []icdproto.LaunchArg{{Kind: abi.ArgBuffer, Value: 1}}}
	l.SetKernel("hold")
	clear(a.arena[:64])
	a.send(icdproto.OpLaunch, l)
	a.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 4096, Length: 64, Event: 4})
	a.send(icdproto.OpFlush, &icdproto.Flush{})

	sc := m.Pool().Sched(inst.Device())
	for sc.Stats().Holder != inst.UUID() && !inst.Lost() {
		if ctx.Err() != nil {
			t.Fatal("the kernel was never seen holding the device")
		}
		time.Sleep(time.Millisecond)
	}
	if pid := m.Pool().WorkerPID(inst.UUID()); pid != 0 {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	} // else the watchdog got there first

	for _, r := range a.wait(3, 4) {
		if r.Status != uint32(abi.StatusDeviceLost) {
			t.Errorf("event %d in flight when the worker died: status %#x, want StatusDeviceLost (%d)", r.Event, r.Status, abi.StatusDeviceLost)
		}
	}

	b := connect(t, srv, deadline)
	b.build(1, vaddSrc)
	b.vadd(1, 2, 11, 1)
	if inst.Lost() {
		t.Errorf("the instance is still lost after the daemon reopened it")
	}
}
