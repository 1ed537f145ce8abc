package icdserver

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// fillKernel is fill(__global uint *out, uint v): out[i] = v + i.
func fillKernel(d *abi.LaunchDesc, buf func(uint32) []byte) error {
	out := buf(d.Args[0].Handle)
	v := uint32(d.Args[1].Bytes[0]) | uint32(d.Args[1].Bytes[1])<<8 | uint32(d.Args[1].Bytes[2])<<16 | uint32(d.Args[1].Bytes[3])<<24
	for i := uint64(0); i < d.GlobalSize[0] && 4*i+4 <= uint64(len(out)); i++ {
		x := v + uint32(i)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	return nil
}

const fillSrc = "__kernel void fill(__global uint *out, uint v) { out[get_global_id(0)] = v + get_global_id(0); }"

type fixture struct {
	s     *Server
	fakes []*drivertest.Device
	devs  []*driver.Device
	irqs  []*driver.Interrupts // per device: nil without drivertest.Config.INTx
}

// newFixture serves one fake device per config.
func newFixture(t testing.TB, cfgs ...drivertest.Config) *fixture {
	t.Helper()
	return newFixtureWith(t, nil, cfgs...)
}

// newFixtureWith is newFixture with the server's Config changed by set.
func newFixtureWith(t testing.TB, set func(*Config), cfgs ...drivertest.Config) *fixture {
	t.Helper()
	if len(cfgs) == 0 {
		cfgs = []drivertest.Config{{}}
	}
	fx := &fixture{}
	for _, cfg := range cfgs {
		f := drivertest.New(cfg, map[string]drivertest.KernelFunc{"fill": fillKernel})
		d, err := driver.Open(f, f, driver.Options{StagingBytes: driver.MinStagingBytes, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		fx.fakes = append(fx.fakes, f)
		fx.devs = append(fx.devs, d)
		var irq *driver.Interrupts
		if cfg.INTx {
			if irq, err = driver.NewInterrupts(d, f.Line(), nil); err != nil {
				t.Fatal(err)
			}
		}
		fx.irqs = append(fx.irqs, irq)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := Config{Devices: fx.devs, Interrupts: fx.irqs, Timeout: 5 * time.Second, Logger: log}
	if set != nil {
		set(&cfg)
	}
	fx.s = New(cfg)
	t.Cleanup(func() {
		fx.s.Close()
		for _, irq := range fx.irqs {
			if irq != nil {
				irq.Close()
			}
		}
		for _, d := range fx.devs {
			d.Close()
		}
	})
	return fx
}

// client is the test's end of a connection.
type client struct {
	t  testing.TB
	c  *net.UnixConn
	id uint64
	// q, once attached (attachQueue), carries the requests the ICD
	// would write there; kicks and drains count what went over the
	// socket for it.
	q             *icdproto.QueueWriter
	kicks, drains int
	onDrain       func() // called before each Drain is sent
}

// socketpair returns two connected SOCK_SEQPACKET Unix sockets.
func socketpair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
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
	return conv(fds[0]), conv(fds[1])
}

func (fx *fixture) connect(t testing.TB) *client {
	t.Helper()
	a, b := socketpair(t)
	if !fx.s.ServeConn(b) {
		t.Fatal("ServeConn refused")
	}
	cl := &client{t: t, c: a}
	t.Cleanup(func() { a.Close() })
	return cl
}

// hello connects and says hello.
func (fx *fixture) hello(t testing.TB) (*client, *icdproto.HelloReply) {
	cl := fx.connect(t)
	r := cl.call(icdproto.OpHello, &icdproto.Hello{Version: icdproto.Version}).(*icdproto.HelloReply)
	return cl, r
}

func (cl *client) sendRaw(b []byte, fds ...int) {
	cl.t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := cl.c.WriteMsgUnix(b, oob, nil); err != nil {
		cl.t.Fatalf("send: %v", err)
	}
}

func (cl *client) send(op icdproto.Op, body any, fds ...int) uint64 {
	cl.t.Helper()
	cl.id++
	b, err := icdproto.Marshal(op, cl.id, body)
	if err != nil {
		cl.t.Fatalf("Marshal(%v) = %v", op, err)
	}
	if cl.q != nil && queued(op) {
		cl.put(b)
		return cl.id
	}
	if cl.q != nil && op.Replied() {
		cl.q.WantSocket()
	}
	cl.sendRaw(b, fds...)
	return cl.id
}

// put writes a message into the submission queue as the ICD does:
// Drain when it is full, Kick when the daemon sleeps.
func (cl *client) put(b []byte) {
	cl.t.Helper()
	if !cl.q.Put(b) {
		cl.kick()
		cl.drains++
		if cl.onDrain != nil {
			cl.onDrain()
		}
		cl.id++
		d, _ := icdproto.Marshal(icdproto.OpDrain, cl.id, &icdproto.Drain{})
		cl.q.WantSocket()
		cl.sendRaw(d)
		if h, r := cl.recv(); h.Op != icdproto.OpDrain|icdproto.ReplyBit {
			cl.t.Fatalf("Drain: got %v %+v", h.Op, r)
		}
		if !cl.q.Put(b) {
			cl.t.Fatal("no room after Drain")
		}
	}
	cl.kick()
}

func (cl *client) kick() {
	if cl.q.NeedKick() {
		cl.kicks++
		k, _ := icdproto.Marshal(icdproto.OpKick, 0, &icdproto.Kick{})
		cl.sendRaw(k)
	}
}

// attachQueue attaches a submission queue of data bytes of data area;
// the client's later requests go through it.
func (cl *client) attachQueue(data int) []byte {
	cl.t.Helper()
	size := icdproto.QueueHeaderSize + data
	fd, m := memfd(cl.t, size, unix.F_SEAL_SHRINK)
	r := cl.call(icdproto.OpQueue, &icdproto.Queue{Size: uint64(size)}, fd).(*icdproto.QueueReply)
	if r.Status != 0 {
		cl.t.Fatalf("queue: status %v", icdproto.ErrCode(r.Status))
	}
	q, err := icdproto.NewQueueWriter(m)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.q = q
	return m
}

// recv reads one message; it returns a nil body at EOF.
func (cl *client) recv() (icdproto.Header, any) {
	cl.t.Helper()
	buf := make([]byte, icdproto.MaxMessage)
	cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := cl.c.Read(buf)
	if errors.Is(err, io.EOF) || (err == nil && n == 0) {
		return icdproto.Header{}, nil
	}
	if err != nil {
		cl.t.Fatalf("recv: %v", err)
	}
	h, body, err := icdproto.Unmarshal(buf[:n])
	if err != nil {
		cl.t.Fatalf("recv: %v", err)
	}
	return h, body
}

// call sends a request and returns its reply; an Error fails the test.
func (cl *client) call(op icdproto.Op, body any, fds ...int) any {
	cl.t.Helper()
	id := cl.send(op, body, fds...)
	h, r := cl.recv()
	if e, ok := r.(*icdproto.Error); ok {
		cl.t.Fatalf("%v: error %v: %s", op, e.Code, e.Message)
	}
	if r == nil || h.ID != id || h.Op != op|icdproto.ReplyBit {
		cl.t.Fatalf("%v: reply %+v %T, want id %d", op, h, r, id)
	}
	return r
}

// expectError reads the Error a protocol error must produce, then EOF.
func (cl *client) expectError(want icdproto.ErrCode) *icdproto.Error {
	cl.t.Helper()
	_, r := cl.recv()
	e, ok := r.(*icdproto.Error)
	if !ok {
		cl.t.Fatalf("got %T %+v, want an Error %v", r, r, want)
	}
	if e.Code != want {
		cl.t.Errorf("Error code %v (%s), want %v", e.Code, e.Message, want)
	}
	if _, r := cl.recv(); r != nil {
		cl.t.Errorf("after the Error got %T, want the connection closed", r)
	}
	return e
}

// memfd returns a memfd of size bytes with the given seals, and its
// mapping in the test.
func memfd(t testing.TB, size int, seals int) (int, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("icd-test-arena", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return fd, m
}

// attach passes a sealed arena of size bytes as id.
func (cl *client) attach(id uint32, size int) []byte {
	cl.t.Helper()
	fd, m := memfd(cl.t, size, unix.F_SEAL_SHRINK)
	r := cl.call(icdproto.OpAttach, &icdproto.Attach{Arena: id, Size: uint64(size)}, fd).(*icdproto.AttachReply)
	if r.Status != 0 {
		cl.t.Fatalf("attach: status %v", icdproto.ErrCode(r.Status))
	}
	return m
}

func (cl *client) wait(events ...uint64) []icdproto.EventRecord {
	cl.t.Helper()
	return cl.call(icdproto.OpWait, &icdproto.Wait{Events: events}).(*icdproto.WaitReply).Events
}

// build compiles src (at the arena's start) as program prog; the log and
// program information go to the arena's second half.
func (cl *client) build(dev, prog uint32, arena []byte, src string) *icdproto.BuildReply {
	cl.t.Helper()
	copy(arena, src)
	return cl.call(icdproto.OpBuild, &icdproto.Build{Device: dev, Program: prog, Arena: 1, SrcLen: uint32(len(src)),
		OutOffset: uint64(len(arena) / 2), OutCap: uint64(len(arena) / 2)}).(*icdproto.BuildReply)
}

func launchFill(prog, buf uint32, n uint64, v uint32, ev uint64) *icdproto.Launch {
	l := &icdproto.Launch{LaunchHead: icdproto.LaunchHead{Program: prog, WorkDim: 1, GlobalSize: [3]uint64{n}, Event: ev},
		Args: []icdproto.LaunchArg{{Kind: abi.ArgBuffer, Value: uint64(buf)}, {Kind: abi.ArgScalar, Size: 4, Value: uint64(v)}}}
	l.SetKernel("fill")
	return l
}

// waitIdle waits until the server has finished every connection.
func (fx *fixture) waitIdle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fx.s.Conns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still served", fx.s.Conns())
		}
		time.Sleep(time.Millisecond)
	}
}
