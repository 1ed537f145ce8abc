package icdserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

func TestMain(m *testing.M) {
	if os.Getenv(scribblerEnv) != "" {
		os.Exit(scribble())
	}
	goleak.VerifyTestMain(m)
}

func TestHello(t *testing.T) {
	fx := newFixture(t, drivertest.Config{}, drivertest.Config{MemSize: 1 << 30, Version: abi.VersionMajor<<16 | 3})
	_, r := fx.hello(t)
	if r.Version != icdproto.Version || len(r.Devices) != 2 {
		t.Fatalf("hello reply %+v, want version 1 and 2 devices", r)
	}
	d := r.Devices[1]
	if d.Index != 1 || d.MemSize != 1<<30 || d.ProfileName() != "fake-1g" || d.DeviceName() != "drivertest fake vgpu" || d.AbiVersion&0xffff != 3 {
		t.Errorf("device record %+v", d)
	}
}

// TestRun is a client's whole life: buffers, transfers, a build, a launch,
// copy and fill, events with timestamps, on a 1.4 device and on a 1.3 one
// (the copy and fill fallbacks).
func TestRun(t *testing.T) {
	for _, version := range []uint32{abi.Version, abi.VersionMajor<<16 | 3} {
		t.Run(fmt.Sprintf("abi-1.%d", version&0xffff), func(t *testing.T) {
			fx := newFixture(t, drivertest.Config{Version: version})
			cl, _ := fx.hello(t)
			arena := cl.attach(1, 1<<20)
			const n = 1024
			cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4 * n, Event: 1})
			cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 2, Size: 4 * n})
			br := cl.build(0, 7, arena, fillSrc)
			if br.Status != 0 {
				t.Fatalf("build status %v", abi.Status(br.Status))
			}
			if abi.Version == version && br.InfoLen == 0 {
				t.Errorf("build on a 1.4 device gave no program information")
			}
			if br.InfoLen > 0 {
				info, err := abi.UnmarshalProgramInfo(arena[1<<19+br.LogLen : 1<<19+br.LogLen+br.InfoLen])
				if err != nil || len(info.Kernels) != 1 || info.Kernels[0].Name != "fill" {
					t.Errorf("program information after the log: %+v, %v", info, err)
				}
				pr := cl.call(icdproto.OpProgramInfo, &icdproto.ProgramInfo{Program: 7, Arena: 1, OutOffset: 0, OutCap: 4096}).(*icdproto.ProgramInfoReply)
				if pr.Status != 0 || pr.InfoLen != br.InfoLen {
					t.Errorf("program-info reply %+v, want info of %d bytes", pr, br.InfoLen)
				}
			}
			cl.send(icdproto.OpLaunch, launchFill(7, 1, n, 100, 2))
			cl.send(icdproto.OpCopy, &icdproto.Copy{Src: 1, Dst: 2, Length: 4 * n, Event: 3})
			cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 2, Arena: 1, ArenaOffset: 8192, Length: 4 * n, Event: 4})
			fill := &icdproto.Fill{Buffer: 1, PatternLen: 4, Offset: 16, Length: 32, Event: 5}
			copy(fill.Pattern[:], "\xaa\xbb\xcc\xdd")
			cl.send(icdproto.OpFill, fill)
			cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 32768, Length: 64, Event: 6})
			cl.send(icdproto.OpMarker, &icdproto.Marker{Event: 7})
			recs := cl.wait(1, 2, 3, 4, 5, 6, 7)
			for i, r := range recs {
				if r.Event != uint64(i+1) || r.Status != 0 {
					t.Errorf("event record %d = %+v, want event %d OK", i, r, i+1)
				}
				if r.SubmitNs == 0 || r.StartNs < r.SubmitNs || r.EndNs < r.StartNs {
					t.Errorf("event %d times submit %d start %d end %d", r.Event, r.SubmitNs, r.StartNs, r.EndNs)
				}
			}
			for i := 0; i < n; i++ {
				if got := binary.LittleEndian.Uint32(arena[8192+4*i:]); got != 100+uint32(i) {
					t.Fatalf("copied element %d = %d, want %d", i, got, 100+i)
				}
			}
			want := binary.LittleEndian.AppendUint32(nil, 100)
			want = binary.LittleEndian.AppendUint32(want, 101)
			want = binary.LittleEndian.AppendUint32(want, 102)
			want = binary.LittleEndian.AppendUint32(want, 103)
			want = append(want, bytes.Repeat([]byte{0xaa, 0xbb, 0xcc, 0xdd}, 8)...)
			if got := arena[32768 : 32768+len(want)]; !bytes.Equal(got, want) {
				t.Errorf("filled buffer = % x, want % x", got, want)
			}
			// Reported events are forgotten: asking again is a protocol error.
			cl.send(icdproto.OpWait, &icdproto.Wait{Events: []uint64{1}})
			cl.expectError(icdproto.ErrUnknownID)
			fx.waitIdle(t)
			if b := fx.fakes[0].Buffers(); b != 0 {
				t.Errorf("%d buffers left on the device after the client closed", b)
			}
		})
	}
}

func TestBuildFailure(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	arena := cl.attach(1, 1<<17)
	br := cl.build(0, 1, arena, "#error nope\n"+fillSrc)
	if abi.Status(br.Status) != abi.StatusBuildFailed || br.LogLen == 0 || br.InfoLen != 0 {
		t.Fatalf("failed build reply %+v", br)
	}
	if log := string(arena[1<<16 : 1<<16+br.LogLen]); !strings.Contains(log, "nope") {
		t.Errorf("build log %q", log)
	}
	// The program id is not live after a failed build.
	cl.send(icdproto.OpLaunch, launchFill(1, 1, 4, 0, 0))
	cl.expectError(icdproto.ErrUnknownID)
}

// TestDeviceFailureIsAnEvent: a command the device refuses fails its
// event, and the connection goes on.
func TestDeviceFailureIsAnEvent(t *testing.T) {
	fx := newFixture(t, drivertest.Config{MemSize: 1 << 20})
	cl, _ := fx.hello(t)
	cl.attach(1, 4096)
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 1 << 19, Event: 1})
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 2, Size: 1 << 19, Event: 2})
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 3, Size: 1 << 19, Event: 3}) // over the quota
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 3, Arena: 1, Length: 16, Event: 4})
	recs := cl.wait(1, 2, 3, 4)
	if recs[0].Status != 0 || recs[1].Status != 0 || recs[2].Status == 0 || recs[3].Status == 0 {
		t.Errorf("events %+v: want the third creation and the read from it to fail", recs)
	}
	recs = cl.call(icdproto.OpPoll, &icdproto.Wait{}).(*icdproto.WaitReply).Events
	if len(recs) != 0 {
		t.Errorf("poll after reporting everything: %+v", recs)
	}
}

func TestWaitAllAndPending(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	const n = icdproto.MaxWaitEvents + 10
	for i := 1; i <= n; i++ {
		cl.send(icdproto.OpMarker, &icdproto.Marker{Event: uint64(i)})
	}
	r := cl.call(icdproto.OpWait, &icdproto.Wait{}).(*icdproto.WaitReply)
	if len(r.Events) != icdproto.MaxWaitEvents || r.Pending != 10 {
		t.Fatalf("wait 0: %d records, pending %d; want %d and 10", len(r.Events), r.Pending, icdproto.MaxWaitEvents)
	}
	r = cl.call(icdproto.OpPoll, &icdproto.Wait{}).(*icdproto.WaitReply)
	if len(r.Events) != 10 || r.Pending != 0 || r.Events[9].Event != n {
		t.Fatalf("poll 0: %d records, pending %d", len(r.Events), r.Pending)
	}
}

func TestAttachRefusals(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	status := func(body *icdproto.Attach, fds ...int) icdproto.ErrCode {
		return icdproto.ErrCode(cl.call(icdproto.OpAttach, body, fds...).(*icdproto.AttachReply).Status)
	}
	unsealed, _ := memfd(t, 8192, 0)
	// A sealed regular file on a disk file system: not a memfd.
	tmp, err := os.CreateTemp(t.TempDir(), "arena")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	if err := tmp.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	small, _ := memfd(t, 4096, unix.F_SEAL_SHRINK)
	p := make([]int, 2)
	if err := unix.Pipe2(p, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	for name, c := range map[string]struct {
		body *icdproto.Attach
		fds  []int
	}{
		"no fd":        {&icdproto.Attach{Arena: 1, Size: 4096}, nil},
		"unsealed":     {&icdproto.Attach{Arena: 1, Size: 4096}, []int{unsealed}},
		"too small":    {&icdproto.Attach{Arena: 1, Size: 8192}, []int{small}},
		"pipe":         {&icdproto.Attach{Arena: 1, Size: 4096}, []int{p[0]}},
		"regular file": {&icdproto.Attach{Arena: 1, Size: 4096}, []int{int(tmp.Fd())}},
		"two fds":      {&icdproto.Attach{Arena: 1, Size: 4096}, []int{small, small}},
		"huge":         {&icdproto.Attach{Arena: 1, Size: 1 << 62}, []int{small}},
	} {
		if got := status(c.body, c.fds...); got != icdproto.ErrArena {
			t.Errorf("%s: attach status %v, want %v", name, got, icdproto.ErrArena)
		}
	}
	// The connection is still usable.
	cl.attach(1, 4096)
}

// TestHostile: each protocol error is answered with Error, the connection
// closes and its objects are freed; the other connection is untouched.
func TestHostile(t *testing.T) {
	type step struct {
		op   icdproto.Op
		body any
	}
	tr := func(buf, arena uint32, off, aoff, n uint64) *icdproto.Transfer {
		return &icdproto.Transfer{Buffer: buf, Arena: arena, Offset: off, ArenaOffset: aoff, Length: n}
	}
	cases := []struct {
		name  string
		steps []step
		raw   []byte
		want  icdproto.ErrCode
	}{
		{name: "short message", raw: []byte{1, 0, 0}, want: icdproto.ErrMalformed},
		{name: "length mismatch", raw: append(binary.LittleEndian.AppendUint32([]byte{40, 0, 0, 0}, 99), make([]byte, 8)...), want: icdproto.ErrMalformed},
		{name: "unknown op", raw: append(binary.LittleEndian.AppendUint32([]byte{99, 0, 0, 0}, 16), make([]byte, 8)...), want: icdproto.ErrUnknownOp},
		{name: "reply op from client", steps: []step{{icdproto.OpAttach | icdproto.ReplyBit, &icdproto.AttachReply{}}}, want: icdproto.ErrUnknownOp},
		{name: "error from client", steps: []step{{icdproto.OpError, &icdproto.Error{Code: 1}}}, want: icdproto.ErrUnknownOp},
		{name: "hello twice", steps: []step{{icdproto.OpHello, &icdproto.Hello{Version: 1}}}, want: icdproto.ErrMalformed},
		{name: "unknown device", steps: []step{{icdproto.OpBufferCreate, &icdproto.BufferCreate{Device: 5, Buffer: 9, Size: 4}}}, want: icdproto.ErrUnknownID},
		{name: "unknown buffer", steps: []step{{icdproto.OpWrite, tr(9, 1, 0, 0, 4)}}, want: icdproto.ErrUnknownID},
		{name: "another connection's buffer", steps: []step{{icdproto.OpRead, tr(1, 1, 0, 0, 4)}}, want: icdproto.ErrUnknownID},
		{name: "unknown arena", steps: []step{{icdproto.OpWrite, tr(10, 2, 0, 0, 4)}}, want: icdproto.ErrUnknownID},
		{name: "outside the arena", steps: []step{{icdproto.OpWrite, tr(10, 1, 0, 4090, 8)}}, want: icdproto.ErrRange},
		{name: "outside the buffer", steps: []step{{icdproto.OpWrite, tr(10, 1, 60, 0, 8)}}, want: icdproto.ErrRange},
		{name: "duplicate buffer", steps: []step{{icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 10, Size: 4}}}, want: icdproto.ErrDuplicate},
		{name: "duplicate arena", steps: []step{{icdproto.OpAttach, &icdproto.Attach{Arena: 1, Size: 4096}}}, want: icdproto.ErrDuplicate},
		{name: "duplicate event", steps: []step{{icdproto.OpMarker, &icdproto.Marker{Event: 5}}, {icdproto.OpMarker, &icdproto.Marker{Event: 5}}}, want: icdproto.ErrDuplicate},
		{name: "unknown event", steps: []step{{icdproto.OpWait, &icdproto.Wait{Events: []uint64{77}}}}, want: icdproto.ErrUnknownID},
		{name: "unknown program", steps: []step{{icdproto.OpLaunch, launchFill(3, 10, 4, 0, 0)}}, want: icdproto.ErrUnknownID},
		{name: "launch with unknown buffer", steps: []step{{icdproto.OpLaunch, launchFill(20, 11, 4, 0, 0)}}, want: icdproto.ErrUnknownID},
		{name: "overlapping copy", steps: []step{{icdproto.OpCopy, &icdproto.Copy{Src: 10, Dst: 10, SrcOffset: 0, DstOffset: 8, Length: 16}}}, want: icdproto.ErrRange},
		{name: "build outside the arena", steps: []step{{icdproto.OpBuild, &icdproto.Build{Program: 21, Arena: 1, SrcLen: 10, SrcOffset: 4095}}}, want: icdproto.ErrRange},
		{name: "free twice", steps: []step{{icdproto.OpBufferFree, &icdproto.BufferFree{Buffer: 10}}, {icdproto.OpBufferFree, &icdproto.BufferFree{Buffer: 10}}}, want: icdproto.ErrUnknownID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fx := newFixture(t)
			// A victim connection with a buffer of known contents.
			victim, _ := fx.hello(t)
			va := victim.attach(1, 4096)
			victim.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 64})
			copy(va, "victim's data")
			victim.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: 1, Arena: 1, Length: 13, Event: 1})

			cl, _ := fx.hello(t)
			arena := cl.attach(1, 4096)
			cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 10, Size: 64})
			if cl.build(0, 20, arena, fillSrc).Status != 0 {
				t.Fatal("build failed")
			}
			if c.raw != nil {
				cl.sendRaw(c.raw)
			}
			for _, s := range c.steps {
				cl.send(s.op, s.body)
			}
			cl.expectError(c.want)

			// The victim's work is intact and its connection serves on.
			if recs := victim.wait(1); recs[0].Status != 0 {
				t.Errorf("victim's write: %+v", recs)
			}
			clear(va) // only now: the daemon reads a write's bytes when it executes it
			victim.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 100, Length: 13, Event: 2})
			if recs := victim.wait(2); recs[0].Status != 0 {
				t.Errorf("victim's read: %+v", recs)
			}
			if got := string(va[100:113]); got != "victim's data" {
				t.Errorf("victim reads %q", got)
			}
			victim.c.Close()
			fx.waitIdle(t)
			if b := fx.fakes[0].Buffers(); b != 0 {
				t.Errorf("%d buffers left after both connections closed", b)
			}
		})
	}
}

func TestBeforeHello(t *testing.T) {
	fx := newFixture(t)
	cl := fx.connect(t)
	cl.send(icdproto.OpFlush, &icdproto.Flush{})
	cl.expectError(icdproto.ErrVersion)
	cl = fx.connect(t)
	cl.send(icdproto.OpHello, &icdproto.Hello{Version: icdproto.Version + 1})
	cl.expectError(icdproto.ErrVersion)
}

func TestTooManyEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 65537 messages")
	}
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	for i := 1; i <= icdproto.MaxEvents; i++ {
		cl.send(icdproto.OpMarker, &icdproto.Marker{Event: uint64(i)})
	}
	cl.send(icdproto.OpMarker, &icdproto.Marker{Event: icdproto.MaxEvents + 1})
	cl.expectError(icdproto.ErrLimit)
}

func TestFDOnOtherMessage(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	fd, _ := memfd(t, 4096, unix.F_SEAL_SHRINK)
	cl.send(icdproto.OpFlush, &icdproto.Flush{}, fd)
	cl.expectError(icdproto.ErrMalformed)
}

func TestOversizedMessage(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	cl.sendRaw(make([]byte, icdproto.MaxMessage+100))
	cl.expectError(icdproto.ErrMalformed)
}

// TestServeListener serves a real unixpacket socket and closes with a
// client still connected and a command pending.
func TestServeListener(t *testing.T) {
	fx := newFixture(t)
	path := filepath.Join(t.TempDir(), "icd.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fx.s.Serve(l) }()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := &client{t: t, c: c}
	r := cl.call(icdproto.OpHello, &icdproto.Hello{Version: 1}).(*icdproto.HelloReply)
	if len(r.Devices) != 1 {
		t.Fatalf("hello over the listener: %+v", r)
	}
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 64, Event: 1})
	if err := fx.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != ErrServerClosed {
		t.Errorf("Serve() = %v, want ErrServerClosed", err)
	}
	if b := fx.fakes[0].Buffers(); b != 0 {
		t.Errorf("%d buffers left after Close", b)
	}
	if err := fx.s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
}

// TestLaunchRefusals: a launch the device refuses fails its event (the
// connection goes on); one abi cannot even encode is a protocol error.
func TestLaunchRefusals(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	arena := cl.attach(1, 1<<16)
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096})
	if cl.build(0, 2, arena, fillSrc).Status != 0 {
		t.Fatal("build failed")
	}
	l := launchFill(2, 1, 64, 0, 1)
	l.LocalSize[0] = 7 // does not divide 64: the device says invalid argument
	cl.send(icdproto.OpLaunch, l)
	if recs := cl.wait(1); abi.Status(recs[0].Status) != abi.StatusInvalidArgument {
		t.Errorf("launch with a bad local size: event %+v, want invalid argument", recs[0])
	}
	big := launchFill(2, 1, 64, 0, 2)
	big.Scalars = make([]byte, 62*256)
	for i := 0; i < 62; i++ {
		big.Args = append(big.Args, icdproto.LaunchArg{Kind: abi.ArgScalar, Size: 256, Value: uint64(256 * i)})
	}
	cl.send(icdproto.OpLaunch, big)
	cl.expectError(icdproto.ErrMalformed)
}

// TestDeviceInfo: the blob comes inline in the reply, is asked of the
// device once, and an older device answers invalid opcode.
func TestDeviceInfo(t *testing.T) {
	want := drivertest.FakeDeviceInfo()
	want.Extensions = []string{"cl_khr_fp64"}
	want.MaxClockFrequency = 1234
	fx := newFixture(t, drivertest.Config{DeviceInfo: &want}, drivertest.Config{Version: abi.VersionMajor<<16 | 3})
	cl, _ := fx.hello(t)
	for i := range 2 {
		before := fx.devs[0].Stats().Commands
		r := cl.call(icdproto.OpDeviceInfo, &icdproto.DeviceInfo{Device: 0}).(*icdproto.DeviceInfoReply)
		if r.Status != 0 {
			t.Fatalf("device-info reply status %v", abi.Status(r.Status))
		}
		got, err := abi.UnmarshalDeviceInfo(r.Info)
		if err != nil || uint64(len(r.Info)) != got.Size() || !cmp.Equal(got, want) {
			t.Errorf("device-info blob = %+v, %v\nwant %+v", got, err, want)
		}
		if n := fx.devs[0].Stats().Commands - before; (i == 0) != (n == 1) {
			t.Errorf("request %d sent %d commands to the device", i, n)
		}
	}
	r := cl.call(icdproto.OpDeviceInfo, &icdproto.DeviceInfo{Device: 1}).(*icdproto.DeviceInfoReply)
	if r.Status != uint32(abi.StatusInvalidOpcode) || len(r.Info) != 0 {
		t.Errorf("device-info of an abi 1.3 device = %+v", r)
	}
	cl.send(icdproto.OpDeviceInfo, &icdproto.DeviceInfo{Device: 2})
	cl.expectError(icdproto.ErrUnknownID)
}

// TestLaunchPrintf: a version-3 launch whose last entry is a printf buffer
// reaches the device as the launch's printf buffer (the fake writes its
// header and output there), and the client reads it back like any
// buffer. An unknown printf buffer, and the flag on a version-2
// connection, are protocol errors.
func TestLaunchPrintf(t *testing.T) {
	const text = "fake kernel output\n"
	fx := newFixture(t, drivertest.Config{Printout: text})
	cl, _ := fx.hello(t)
	arena := cl.attach(1, 1<<16)
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096})
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 2, Size: 64})
	if cl.build(0, 3, arena, fillSrc).Status != 0 {
		t.Fatal("build failed")
	}
	printing := func(buf uint32, ev uint64) *icdproto.Launch {
		l := launchFill(3, 1, 16, 5, ev)
		l.Flags |= icdproto.LaunchPrintf
		l.Args = append(l.Args, icdproto.LaunchArg{Kind: abi.ArgBuffer, Value: uint64(buf)})
		return l
	}
	cl.send(icdproto.OpLaunch, printing(2, 1))
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 2, Arena: 1, ArenaOffset: 0, Length: 64, Event: 2})
	for _, r := range cl.wait(1, 2) {
		if r.Status != 0 {
			t.Fatalf("event %d: status %v", r.Event, abi.Status(r.Status))
		}
	}
	h, err := abi.UnmarshalPrintfHeader(arena[:64], 64)
	if err != nil || h.Flags != abi.PrintfCaptured || string(arena[16:16+h.Length]) != text {
		t.Errorf("printf buffer: %+v %q, %v", h, arena[16:16+h.Length], err)
	}
	cl.send(icdproto.OpLaunch, printing(9, 3))
	cl.expectError(icdproto.ErrUnknownID)

	// A version-2 connection may not name a printf buffer.
	old := fx.connect(t)
	old.call(icdproto.OpHello, &icdproto.Hello{Version: 2})
	oarena := old.attach(1, 1<<16)
	old.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4096})
	old.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 2, Size: 64})
	if old.build(0, 3, oarena, fillSrc).Status != 0 {
		t.Fatal("build failed")
	}
	old.send(icdproto.OpLaunch, printing(2, 1))
	old.expectError(icdproto.ErrVersion)
}
