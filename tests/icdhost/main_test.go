package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

const vaddSrc = `__kernel void vadd(__global const uint *a, __global uint *b, uint k) {
	size_t i = get_global_id(0);
	b[i] = a[i] + k;
}`

// runHarness runs the harness in-process with args and waits for its
// ready line; stop ends it (the end of its stdin) and checks what run
// returned.
func runHarness(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(context.Background(), args, stdinR, stdoutW, io.Discard)
		stdoutW.Close()
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdoutR).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdoutR) //nolint:errcheck // drained until the harness ends
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("icdhost printed %q, want ready (error: %v)", line, <-errc)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("icdhost not ready in 60 s")
	}
	return func() {
		stdinW.Close() // end of stdin: the harness stops
		if err := <-errc; err != nil {
			t.Errorf("run() = %v", err)
		}
	}
}

// newArena creates a memfd of size bytes that cannot shrink and maps it:
// an ICD's arena, for Attach with fd. The caller closes fd and unmaps the
// arena.
func newArena(t *testing.T, size int) (fd int, arena []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("arena", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	arena, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return fd, arena
}

// TestICDHost runs the harness in-process over the real vGPU stack (an
// OpenCL device, no VM) and drives one client through it: a build with
// program information, buffers, a write, a launch, a copy, a fill and a
// read, checked against the CPU.
func TestICDHost(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an OpenCL device")
	}
	sock := filepath.Join(t.TempDir(), "icd.sock")
	stop := runHarness(t, "-socket", sock, "-guest-mem", "64000000", "-staging", "8388608")
	defer stop()

	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var id uint64
	send := func(op icdproto.Op, body any, fds ...int) {
		t.Helper()
		id++
		b, err := icdproto.Marshal(op, id, body)
		if err != nil {
			t.Fatal(err)
		}
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() any {
		t.Helper()
		buf := make([]byte, icdproto.MaxMessage)
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		_, body, err := icdproto.Unmarshal(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := body.(*icdproto.Error); ok {
			t.Fatalf("daemon: %v: %s", e.Code, e.Message)
		}
		return body
	}
	call := func(op icdproto.Op, body any, fds ...int) any { send(op, body, fds...); return recv() }

	hr := call(icdproto.OpHello, &icdproto.Hello{Version: icdproto.Version}).(*icdproto.HelloReply)
	if len(hr.Devices) != 1 || hr.Devices[0].ProfileName() != "vgpu-medium" {
		t.Fatalf("hello: %+v", hr.Devices)
	}
	minor := hr.Devices[0].AbiVersion & 0xffff
	const arenaSize = 1 << 20
	fd, arena := newArena(t, arenaSize)
	defer unix.Close(fd)
	defer unix.Munmap(arena)
	if r := call(icdproto.OpAttach, &icdproto.Attach{Arena: 1, Size: arenaSize}, fd).(*icdproto.AttachReply); r.Status != 0 {
		t.Fatalf("attach status %d", r.Status)
	}

	copy(arena, vaddSrc)
	br := call(icdproto.OpBuild, &icdproto.Build{Program: 1, Arena: 1, SrcLen: uint32(len(vaddSrc)), OutOffset: 1 << 19, OutCap: 1 << 16}).(*icdproto.BuildReply)
	if br.Status != 0 {
		t.Fatalf("build: %v: %s", abi.Status(br.Status), arena[1<<19:1<<19+br.LogLen])
	}
	if minor >= 4 && br.InfoLen > 0 && br.LogLen+br.InfoLen <= 1<<16 {
		info, err := abi.UnmarshalProgramInfo(arena[1<<19+br.LogLen : 1<<19+br.LogLen+br.InfoLen])
		if err != nil || len(info.Kernels) != 1 || info.Kernels[0].Name != "vadd" || len(info.Kernels[0].Args) != 3 {
			t.Errorf("program information %+v, %v", info, err)
		}
	}

	const n = 4096
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(arena[65536+4*i:], uint32(3*i))
	}
	send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4 * n, Event: 1})
	send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 2, Size: 4 * n, Event: 2})
	send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 3, Size: 4 * n, Event: 3})
	send(icdproto.OpWrite, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 65536, Length: 4 * n, Event: 4})
	l := &icdproto.Launch{LaunchHead: icdproto.LaunchHead{Program: 1, WorkDim: 1, GlobalSize: [3]uint64{n}, LocalSize: [3]uint64{64}, Event: 5},
		Args: []icdproto.LaunchArg{{Kind: abi.ArgBuffer, Value: 1}, {Kind: abi.ArgBuffer, Value: 2}, {Kind: abi.ArgScalar, Size: 4, Value: 7}}}
	l.SetKernel("vadd")
	send(icdproto.OpLaunch, l)
	send(icdproto.OpCopy, &icdproto.Copy{Src: 2, Dst: 3, Length: 4 * n, Event: 6})
	fill := &icdproto.Fill{Buffer: 3, PatternLen: 4, Offset: 0, Length: 16, Event: 7}
	binary.LittleEndian.PutUint32(fill.Pattern[:], 0xfeedf00d)
	send(icdproto.OpFill, fill)
	send(icdproto.OpRead, &icdproto.Transfer{Buffer: 3, Arena: 1, ArenaOffset: 131072, Length: 4 * n, Event: 8})
	send(icdproto.OpFlush, &icdproto.Flush{})
	wr := call(icdproto.OpWait, &icdproto.Wait{Events: []uint64{1, 2, 3, 4, 5, 6, 7, 8}}).(*icdproto.WaitReply)
	for _, r := range wr.Events {
		if r.Status != 0 {
			t.Errorf("event %d: status %v", r.Event, abi.Status(r.Status))
		}
		if r.Event == 5 && !(r.SubmitNs <= r.StartNs && r.StartNs <= r.EndNs) {
			t.Errorf("launch times submit %d start %d end %d", r.SubmitNs, r.StartNs, r.EndNs)
		}
	}
	for i := 0; i < n; i++ {
		want := uint32(3*i + 7)
		if i < 4 {
			want = 0xfeedf00d
		}
		if got := binary.LittleEndian.Uint32(arena[131072+4*i:]); got != want {
			t.Fatalf("element %d = %#x, want %#x", i, got, want)
		}
	}
}
