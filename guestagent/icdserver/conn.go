package icdserver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/icdproto"
	"github.com/vgpud/vgpud/internal/pollbudget"
	"github.com/vgpud/vgpud/internal/scmrights"
)

// bufObj and progObj are a connection's objects: the device handle behind
// a client id.
type bufObj struct {
	dev *device
	b   driver.Buffer
}

type progObj struct {
	dev *device
	p   driver.Program
}

// lost hands a device found lost to its reaper, which reopens it.
func lost(dev *device, err error) {
	if errors.Is(err, driver.ErrDeviceLost) {
		dev.kick()
	}
}

// event is a client's event: one tracked request's outcome.
type event struct {
	id       uint64
	done     bool
	reported bool // taken out of the table (a stale entry of conn.order)
	status   abi.Status
	submit   int64 // CLOCK_MONOTONIC ns
	start    int64
	end      int64
}

func (e *event) record() icdproto.EventRecord {
	r := icdproto.EventRecord{Event: e.id, Status: icdproto.NotComplete, SubmitNs: uint64(e.submit)}
	if e.done {
		r.Status, r.StartNs, r.EndNs = uint32(e.status), uint64(e.start), uint64(e.end)
	}
	return r
}

// cmd is one tracked request: one or more driver commands (parts) whose
// completions make up its event. Guarded by conn.mu.
type cmd struct {
	ev       *event // nil: no event asked for
	launch   bool   // the start time comes from the kernel time
	parts    int    // parts submitted and not completed
	sealed   bool   // every part is submitted
	finished bool
	failed   bool
	status   abi.Status
	kernelNs uint64
}

// conn is one client connection.
type conn struct {
	s    *Server
	c    *net.UnixConn
	id   uint64
	log  *slog.Logger
	quit chan struct{} // closed by stop: waits give up
	once sync.Once

	// Owned by the connection's goroutine.
	hello    bool
	version  uint32                // the protocol version of the Hello
	queue    *icdproto.QueueReader // the submission queue, if attached
	queueMap []byte
	qpoll    pollbudget.Budget // the submission queue's looks (queue.go)
	arenas   map[uint32][]byte
	buffers  map[uint32]bufObj
	programs map[uint32]progObj
	used     map[*device]bool    // devices this connection submitted to
	ctxs     map[*device]*device // per vGPU used: the connection's device context (or the vGPU, shared)

	// wake is signalled by completions.
	wake chan struct{}
	// poller says whether a blocking wait looks for its completions
	// before it sleeps (waitpoll.go).
	poller pollbudget.Budget

	mu       sync.Mutex // taken in driver callbacks: after driver.Device's mutex
	events   map[uint64]*event
	order    []*event // completed events in completion order; reported ones are stale
	inflight int      // tracked requests not finished
	peak     int      // most events held at once
}

// maxArenaBytes bounds the sum of a connection's arena sizes: address
// space of the daemon that the client's mappings take (the ICD maps one
// arena of at most 64 MiB per context). An Attach beyond it is refused
// with status ErrLimit.
const maxArenaBytes = 4 << 30

func newConn(s *Server, c *net.UnixConn, id uint64) *conn {
	return &conn{s: s, c: c, id: id, log: s.log, quit: make(chan struct{}),
		arenas: map[uint32][]byte{}, buffers: map[uint32]bufObj{}, programs: map[uint32]progObj{},
		used: map[*device]bool{}, ctxs: map[*device]*device{}, wake: make(chan struct{}, 1), events: map[uint64]*event{}}
}

// stop closes the socket and makes waits give up; the goroutine then
// cleans up.
func (c *conn) stop() {
	c.once.Do(func() {
		close(c.quit)
		c.c.Close()
	})
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// oobSize holds up to 8 file descriptors: Attach passes one; more are
// received to be closed.
var oobSize = unix.CmsgSpace(8 * 4)

// serve reads and executes the connection's requests in order, then
// cleans up. With a submission queue attached (queue.go), it runs the
// queue until the queue is empty and the daemon may sleep, and only then
// reads the socket.
func (c *conn) serve() {
	pid, uid, gid := peerCred(c.c)
	c.log = c.s.log.With("conn", c.id, "pid", pid, "uid", uid)
	c.log.Info("icd client connected", "gid", gid)
	defer c.cleanup()
	buf := make([]byte, icdproto.MaxMessage)
	oob := make([]byte, oobSize)
	var qbuf []byte
	for {
		if c.queue != nil {
			if qbuf == nil {
				qbuf = make([]byte, icdproto.MaxMessage)
			}
			if !c.runQueue(qbuf) {
				return
			}
		}
		n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
		if c.queue != nil {
			c.queue.Awake()
		}
		fds, perr := scmrights.Parse(oob[:oobn])
		if err != nil {
			scmrights.Close(fds)
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.log.Warn("icd read", "err", err)
			}
			return
		}
		c.s.queues.socket.Add(1)
		if perr != nil {
			scmrights.Close(fds)
			c.fail(0, icdproto.Errorf(icdproto.ErrMalformed, "%v", perr))
			return
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			scmrights.Close(fds)
			c.fail(0, icdproto.Errorf(icdproto.ErrMalformed, "message longer than %d bytes or with too many file descriptors", icdproto.MaxMessage))
			return
		}
		h, body, err := icdproto.Unmarshal(buf[:n])
		if err != nil {
			scmrights.Close(fds)
			c.fail(h.ID, err)
			return
		}
		if c.queue != nil && h.Op != icdproto.OpKick {
			// The request the client set the sock word for: a kick
			// read now may have been sent before it was set.
			c.queue.SocketServed()
		}
		if !c.exec(h, body, fds) {
			return
		}
	}
}

// exec executes one decoded request and sends its reply; false when the
// connection must end (a protocol error, answered, or a reply that could
// not be sent). It owns fds.
func (c *conn) exec(h icdproto.Header, body any, fds []int) bool {
	reply, err := c.handle(h, body, fds)
	if err != nil {
		c.fail(h.ID, err)
		return false
	}
	if reply == nil {
		return true
	}
	b, err := icdproto.Marshal(h.Op|icdproto.ReplyBit, h.ID, reply)
	if err != nil {
		c.fail(h.ID, icdproto.Errorf(icdproto.ErrInternal, "encode reply: %v", err))
		return false
	}
	if _, err := c.c.Write(b); err != nil {
		c.log.Warn("icd reply", "op", h.Op, "err", err)
		return false
	}
	return true
}

// maxErrorText bounds an Error message's text.
const maxErrorText = 1024

// fail sends an Error message for a protocol error; the caller then closes
// the connection.
func (c *conn) fail(id uint64, err error) {
	code := icdproto.CodeOf(err)
	msg := err.Error()
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText]
	}
	msg = strings.ToValidUTF8(msg, "?")
	c.log.Warn("icd protocol error: closing", "code", code.String(), "err", err)
	b, merr := icdproto.Marshal(icdproto.OpError, id, &icdproto.Error{Code: code, Message: msg})
	if merr == nil {
		c.c.Write(b) //nolint:errcheck // the connection closes anyway
	}
}

// handle executes one request. It returns the reply body (nil for an
// unanswered request) or a protocol error. It owns fds.
func (c *conn) handle(h icdproto.Header, body any, fds []int) (any, error) {
	if h.Op != icdproto.OpAttach && h.Op != icdproto.OpQueue && len(fds) > 0 {
		scmrights.Close(fds)
		return nil, icdproto.Errorf(icdproto.ErrMalformed, "%v carries %d file descriptors", h.Op, len(fds))
	}
	if h.Op.IsReply() || h.Op == icdproto.OpError {
		return nil, icdproto.Errorf(icdproto.ErrUnknownOp, "%v is not a request", h.Op)
	}
	if !c.hello && h.Op != icdproto.OpHello {
		scmrights.Close(fds)
		return nil, icdproto.Errorf(icdproto.ErrVersion, "%v before hello", h.Op)
	}
	switch v := body.(type) {
	case *icdproto.Hello:
		return c.doHello(v)
	case *icdproto.Attach:
		return c.doAttach(v, fds)
	case *icdproto.Queue:
		return c.doQueue(v, fds)
	case *icdproto.Kick:
		if c.version < 2 {
			return nil, icdproto.Errorf(icdproto.ErrUnknownOp, "kick in protocol version %d", c.version)
		}
		c.s.queues.kicks.Add(1)
		return nil, nil
	case *icdproto.Drain:
		if c.version < 2 {
			return nil, icdproto.Errorf(icdproto.ErrUnknownOp, "drain in protocol version %d", c.version)
		}
		// The socket is read only when the queue is empty: everything
		// written before the Drain has run.
		return &icdproto.Drain{}, nil
	case *icdproto.DeviceInfo:
		return c.doDeviceInfo(v)
	case *icdproto.BufferCreate:
		return nil, c.doBufferCreate(v)
	case *icdproto.BufferFree:
		return nil, c.doBufferFree(v)
	case *icdproto.Transfer:
		return nil, c.doTransfer(h.Op == icdproto.OpWrite, v)
	case *icdproto.Copy:
		return nil, c.doCopy(v)
	case *icdproto.Fill:
		return nil, c.doFill(v)
	case *icdproto.Build:
		return c.doBuild(v)
	case *icdproto.ProgramFree:
		return nil, c.doProgramFree(v)
	case *icdproto.ProgramInfo:
		return c.doProgramInfo(v)
	case *icdproto.Launch:
		return nil, c.doLaunch(v)
	case *icdproto.Flush:
		c.flush()
		return nil, nil
	case *icdproto.Wait:
		return c.doWait(h.Op == icdproto.OpWait, v)
	case *icdproto.Marker:
		return nil, c.doMarker(v)
	}
	return nil, icdproto.Errorf(icdproto.ErrUnknownOp, "%v", h.Op)
}

func (c *conn) doHello(v *icdproto.Hello) (any, error) {
	if c.hello {
		return nil, icdproto.Errorf(icdproto.ErrMalformed, "hello twice")
	}
	if v.Version < icdproto.MinVersion || v.Version > icdproto.Version {
		return nil, icdproto.Errorf(icdproto.ErrVersion, "client speaks version %d, daemon %d to %d", v.Version, icdproto.MinVersion, icdproto.Version)
	}
	c.hello = true
	c.version = v.Version
	r := &icdproto.HelloReply{Version: v.Version}
	for _, dev := range c.s.devs[:min(len(c.s.devs), icdproto.MaxDevices)] {
		// A device whose context was lost: a new client gets it
		// reopened, not a dead ring, whether the loss happened while
		// nobody used it (CheckLost reads RegError) or the reaper saw it
		// and has not reopened the device yet (LostSeen; revive waits
		// for the reaper's reopen instead of racing it).
		if dev.d.LostSeen() || dev.d.CheckLost() {
			c.s.revive(dev)
		}
		in := dev.d.Info()
		rec := icdproto.DeviceRecord{Index: uint32(dev.index), AbiVersion: in.Version, Features: in.Features,
			ComputeUnits: in.ComputeUnits, MemSize: in.MemSize, MaxAlloc: in.MaxAlloc, MaxWorkGroup: in.MaxWorkGroup}
		copy(rec.Profile[:len(rec.Profile)-1], in.Profile)
		copy(rec.Name[:len(rec.Name)-1], in.Name)
		r.Devices = append(r.Devices, rec)
	}
	return r, nil
}

func (c *conn) doAttach(v *icdproto.Attach, fds []int) (any, error) {
	defer scmrights.Close(fds)
	if _, ok := c.arenas[v.Arena]; ok {
		return nil, icdproto.Errorf(icdproto.ErrDuplicate, "arena %d", v.Arena)
	}
	if len(c.arenas) >= icdproto.MaxArenas {
		return nil, icdproto.Errorf(icdproto.ErrLimit, "more than %d arenas", icdproto.MaxArenas)
	}
	if len(fds) != 1 {
		c.log.Info("icd attach refused", "arena", v.Arena, "fds", len(fds))
		return &icdproto.AttachReply{Status: uint32(icdproto.ErrArena)}, nil
	}
	var total uint64
	for _, m := range c.arenas {
		total += uint64(len(m))
	}
	if v.Size <= maxArenaSize && v.Size > maxArenaBytes-total { // a larger one is no arena at all (mapArena)
		c.log.Info("icd attach refused: arena bytes over the limit", "arena", v.Arena, "size", v.Size, "attached", total, "limit", uint64(maxArenaBytes))
		return &icdproto.AttachReply{Status: uint32(icdproto.ErrLimit)}, nil
	}
	m, err := mapArena(fds[0], v.Size)
	if err != nil {
		c.log.Info("icd attach refused", "arena", v.Arena, "err", err)
		return &icdproto.AttachReply{Status: uint32(icdproto.CodeOf(err))}, nil
	}
	c.arenas[v.Arena] = m
	return &icdproto.AttachReply{}, nil
}

// --- lookups: each failure is a protocol error ---

// doDeviceInfo answers with the device's abi device-information blob, or
// the status that kept the device from giving it (invalid opcode before
// abi 1.4).
func (c *conn) doDeviceInfo(v *icdproto.DeviceInfo) (any, error) {
	// A query, asked of the vGPU's shared ring (the blob is kept per
	// vGPU): it makes no device context, so a process's probe connection
	// (the ICD's clGetPlatformIDs) holds none.
	dev, err := c.vgpu(v.Device)
	if err != nil {
		return nil, err
	}
	if minor(dev) < 4 {
		return &icdproto.DeviceInfoReply{Status: uint32(abi.StatusInvalidOpcode)}, nil
	}
	blob, err := dev.deviceInfo(c.version)
	if err != nil {
		lost(dev, err)
		return &icdproto.DeviceInfoReply{Status: uint32(statusOf(err))}, nil
	}
	if len(blob) > icdproto.MaxDeviceInfo { // abi bounds it the same
		return &icdproto.DeviceInfoReply{Status: uint32(abi.StatusInternal)}, nil
	}
	return &icdproto.DeviceInfoReply{Info: blob}, nil
}

// vgpu returns vGPU i itself (its shared ring).
func (c *conn) vgpu(i uint32) (*device, error) {
	if int64(i) >= int64(len(c.s.devs)) {
		return nil, icdproto.Errorf(icdproto.ErrUnknownID, "device %d (the daemon serves %d)", i, len(c.s.devs))
	}
	return c.s.devs[i], nil
}

// device returns what the connection submits to on vGPU i: its own
// device context, made at its first use (Config.Contexts), or the vGPU's
// shared ring.
func (c *conn) device(i uint32) (*device, error) {
	base, err := c.vgpu(i)
	if err != nil {
		return nil, err
	}
	if d := c.ctxs[base]; d != nil {
		return d, nil
	}
	d, err := c.s.openContext(base, c.log)
	if err != nil {
		return nil, err
	}
	c.ctxs[base] = d
	return d, nil
}

func (c *conn) buffer(id uint32) (bufObj, error) {
	o, ok := c.buffers[id]
	if !ok {
		return o, icdproto.Errorf(icdproto.ErrUnknownID, "buffer %d", id)
	}
	return o, nil
}

func (c *conn) program(id uint32) (progObj, error) {
	o, ok := c.programs[id]
	if !ok {
		return o, icdproto.Errorf(icdproto.ErrUnknownID, "program %d", id)
	}
	return o, nil
}

// arenaRange returns n bytes of arena a at off.
func (c *conn) arenaRange(a uint32, off, n uint64) ([]byte, error) {
	m, ok := c.arenas[a]
	if !ok {
		return nil, icdproto.Errorf(icdproto.ErrUnknownID, "arena %d", a)
	}
	if off+n < off || off+n > uint64(len(m)) {
		return nil, icdproto.Errorf(icdproto.ErrRange, "arena %d of %d bytes: range %d+%d", a, len(m), off, n)
	}
	return m[off : off+n : off+n], nil
}

func bufferRange(o bufObj, id uint32, off, n uint64) error {
	if off+n < off || off+n > o.b.Size {
		return icdproto.Errorf(icdproto.ErrRange, "buffer %d of %d bytes: range %d+%d", id, o.b.Size, off, n)
	}
	return nil
}

// --- tracked requests ---

// begin starts a tracked request with event id ev (0: none).
func (c *conn) begin(ev uint64, launch bool) (*cmd, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := &cmd{launch: launch}
	if ev != 0 {
		if _, ok := c.events[ev]; ok {
			return nil, icdproto.Errorf(icdproto.ErrDuplicate, "event %d", ev)
		}
		if len(c.events) >= icdproto.MaxEvents {
			return nil, icdproto.Errorf(icdproto.ErrLimit, "more than %d events not reported", icdproto.MaxEvents)
		}
		cm.ev = &event{id: ev, submit: monoNow()}
		c.events[ev] = cm.ev
		c.peak = max(c.peak, len(c.events))
	}
	c.inflight++
	return cm, nil
}

// part registers one driver command of cm on dev and returns its callback.
func (c *conn) part(cm *cmd, dev *device) func(abi.Completion) {
	c.used[dev] = true
	c.mu.Lock()
	cm.parts++
	c.mu.Unlock()
	return func(comp abi.Completion) {
		c.mu.Lock()
		cm.parts--
		cm.note(comp.Status)
		if cm.launch && comp.Status == abi.StatusOK {
			cm.kernelNs += comp.Detail
		}
		c.finishLocked(cm)
		c.mu.Unlock()
		c.signal()
	}
}

func (cm *cmd) note(s abi.Status) {
	if !cm.failed && s != abi.StatusOK {
		cm.failed, cm.status = true, s
	}
}

// finishLocked completes cm once it is sealed and every part has
// completed. c.mu held.
func (c *conn) finishLocked(cm *cmd) {
	if !cm.sealed || cm.parts > 0 || cm.finished {
		return
	}
	cm.finished = true
	c.inflight--
	if e := cm.ev; e != nil {
		e.done, e.status, e.end = true, cm.status, monoNow()
		e.start = e.submit
		if cm.launch && uint64(e.end-e.submit) > cm.kernelNs {
			e.start = e.end - int64(cm.kernelNs)
		}
		c.order = append(c.order, e)
		if len(c.order) > 2*icdproto.MaxEvents {
			c.compactOrder()
		}
	}
}

// compactOrder drops stale entries of c.order. c.mu held.
func (c *conn) compactOrder() {
	live := c.order[:0]
	for _, e := range c.order {
		if !e.reported {
			live = append(live, e)
		}
	}
	clear(c.order[len(live):])
	c.order = live
}

// seal ends the submission of cm's parts. err is the error of the last
// driver call (nil if it succeeded); that call's part is not in flight. A
// driver error that means the request was invalid is returned as a
// protocol error; any other is cm's status.
func (c *conn) seal(cm *cmd, dev *device, err error) error {
	c.mu.Lock()
	if err != nil {
		cm.parts--
		cm.note(statusOf(err))
	}
	cm.sealed = true
	c.finishLocked(cm)
	c.mu.Unlock()
	if dev != nil {
		dev.kick()
	}
	c.signal()
	if dev != nil {
		lost(dev, err)
	}
	if refused(err) {
		return icdproto.Errorf(icdproto.ErrMalformed, "%v", err)
	}
	if err != nil {
		c.log.Debug("icd submission failed", "err", err)
	}
	return nil
}

// refused reports whether the driver refused a request before submitting
// it because of its arguments (driver.ErrInvalid, or a launch descriptor
// abi cannot encode): the request was invalid in a way the daemon did not
// check itself, a protocol error. A device's completion status never is.
func refused(err error) bool {
	return err != nil && (errors.Is(err, driver.ErrInvalid) || errors.Is(err, abi.ErrMalformed))
}

// statusOf is the abi status an event reports for a driver error.
func statusOf(err error) abi.Status {
	var se *abi.StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return abi.StatusDeviceError // timeout, closed, suspended too long
}

func (c *conn) doBufferCreate(v *icdproto.BufferCreate) error {
	dev, err := c.device(v.Device)
	if err != nil {
		return err
	}
	if _, ok := c.buffers[v.Buffer]; ok {
		return icdproto.Errorf(icdproto.ErrDuplicate, "buffer %d", v.Buffer)
	}
	if len(c.buffers) >= icdproto.MaxBuffers {
		return icdproto.Errorf(icdproto.ErrLimit, "more than %d buffers", icdproto.MaxBuffers)
	}
	cm, err := c.begin(v.Event, false)
	if err != nil {
		return err
	}
	b, err := dev.d.CreateBufferNotify(v.Size, v.Flags, c.part(cm, dev))
	if err == nil {
		c.buffers[v.Buffer] = bufObj{dev: dev, b: b}
	}
	return c.seal(cm, dev, err)
}

func (c *conn) doBufferFree(v *icdproto.BufferFree) error {
	o, err := c.buffer(v.Buffer)
	if err != nil {
		return err
	}
	delete(c.buffers, v.Buffer)
	return c.freeBuffer(o)
}

func (c *conn) freeBuffer(o bufObj) error {
	cm, _ := c.begin(0, false)
	return c.seal(cm, o.dev, o.dev.d.FreeNotify(o.b, c.part(cm, o.dev)))
}

func (c *conn) freeProgram(o progObj) error {
	cm, _ := c.begin(0, false)
	return c.seal(cm, o.dev, o.dev.d.FreeProgramNotify(o.p, c.part(cm, o.dev)))
}

func (c *conn) doTransfer(write bool, v *icdproto.Transfer) error {
	o, err := c.buffer(v.Buffer)
	if err != nil {
		return err
	}
	if err := bufferRange(o, v.Buffer, v.Offset, v.Length); err != nil {
		return err
	}
	data, err := c.arenaRange(v.Arena, v.ArenaOffset, v.Length)
	if err != nil {
		return err
	}
	cm, err := c.begin(v.Event, false)
	if err != nil {
		return err
	}
	done := c.part(cm, o.dev)
	if write {
		err = o.dev.d.WriteNotify(o.b, v.Offset, data, done)
	} else {
		err = o.dev.d.ReadAsync(o.b, v.Offset, data, done)
	}
	return c.seal(cm, o.dev, err)
}

// scratchBytes is the piece size of the copy and fill fallbacks on devices
// before ABI 1.4.
const scratchBytes = 4 << 20

func (c *conn) doCopy(v *icdproto.Copy) error {
	src, err := c.buffer(v.Src)
	if err != nil {
		return err
	}
	dst, err := c.buffer(v.Dst)
	if err != nil {
		return err
	}
	if src.dev != dst.dev {
		return icdproto.Errorf(icdproto.ErrMalformed, "copy between buffers of devices %d and %d", src.dev.index, dst.dev.index)
	}
	if err := bufferRange(src, v.Src, v.SrcOffset, v.Length); err != nil {
		return err
	}
	if err := bufferRange(dst, v.Dst, v.DstOffset, v.Length); err != nil {
		return err
	}
	if v.Src == v.Dst && v.SrcOffset < v.DstOffset+v.Length && v.DstOffset < v.SrcOffset+v.Length {
		return icdproto.Errorf(icdproto.ErrRange, "copy within buffer %d: %d+%d and %d+%d overlap", v.Src, v.SrcOffset, v.Length, v.DstOffset, v.Length)
	}
	dev := src.dev
	cm, err := c.begin(v.Event, false)
	if err != nil {
		return err
	}
	if minor(dev) >= 4 {
		return c.seal(cm, dev, dev.d.CopyBuffer(src.b, dst.b, v.SrcOffset, v.DstOffset, v.Length, c.part(cm, dev)))
	}
	// Before ABI 1.4: read each piece back (waiting for it) and write it.
	tmp := make([]byte, min(v.Length, scratchBytes))
	for pos := uint64(0); pos < v.Length; pos += uint64(len(tmp)) {
		piece := tmp[:min(uint64(len(tmp)), v.Length-pos)]
		if err := dev.d.Read(src.b, v.SrcOffset+pos, piece); err != nil {
			c.part(cm, dev) // the failed piece counts as a part that did not start
			return c.seal(cm, dev, err)
		}
		if err := dev.d.WriteNotify(dst.b, v.DstOffset+pos, piece, c.part(cm, dev)); err != nil {
			return c.seal(cm, dev, err)
		}
	}
	return c.seal(cm, dev, nil)
}

func (c *conn) doFill(v *icdproto.Fill) error {
	o, err := c.buffer(v.Buffer)
	if err != nil {
		return err
	}
	if err := bufferRange(o, v.Buffer, v.Offset, v.Length); err != nil {
		return err
	}
	dev := o.dev
	pattern := v.Pattern[:v.PatternLen]
	cm, err := c.begin(v.Event, false)
	if err != nil {
		return err
	}
	if minor(dev) >= 4 {
		return c.seal(cm, dev, dev.d.FillBuffer(o.b, v.Offset, v.Length, pattern, c.part(cm, dev)))
	}
	// Before ABI 1.4: write the expanded pattern, piece by piece.
	tmp := make([]byte, min(v.Length, scratchBytes))
	for i := 0; i < len(tmp); i += len(pattern) {
		copy(tmp[i:], pattern)
	}
	for pos := uint64(0); pos < v.Length; pos += uint64(len(tmp)) {
		piece := tmp[:min(uint64(len(tmp)), v.Length-pos)]
		if err := dev.d.WriteNotify(o.b, v.Offset+pos, piece, c.part(cm, dev)); err != nil {
			return c.seal(cm, dev, err)
		}
	}
	return c.seal(cm, dev, nil)
}

func minor(dev *device) uint32 { return dev.d.Info().Version & 0xffff }

func (c *conn) doBuild(v *icdproto.Build) (any, error) {
	dev, err := c.device(v.Device)
	if err != nil {
		return nil, err
	}
	if _, ok := c.programs[v.Program]; ok {
		return nil, icdproto.Errorf(icdproto.ErrDuplicate, "program %d", v.Program)
	}
	if len(c.programs) >= icdproto.MaxPrograms {
		return nil, icdproto.Errorf(icdproto.ErrLimit, "more than %d programs", icdproto.MaxPrograms)
	}
	src, err := c.arenaRange(v.Arena, v.SrcOffset, uint64(v.SrcLen))
	if err != nil {
		return nil, err
	}
	opts, err := c.arenaRange(v.Arena, v.OptsOffset, uint64(v.OptsLen))
	if err != nil {
		return nil, err
	}
	out, err := c.arenaRange(v.Arena, v.OutOffset, v.OutCap)
	if err != nil {
		return nil, err
	}
	if v.Flags&uint32(abi.FlagIL) != 0 && c.version < 5 {
		return nil, icdproto.Errorf(icdproto.ErrVersion, "a SPIR-V module in protocol version %d", c.version)
	}
	c.used[dev] = true
	// string() copies: the client may change the arena meanwhile.
	p, log, err := dev.d.BuildFlags(string(src), string(opts), uint16(v.Flags))
	lost(dev, err)
	if refused(err) {
		return nil, icdproto.Errorf(icdproto.ErrMalformed, "build: %v", err)
	}
	r := &icdproto.BuildReply{Status: uint32(statusOf(err)), LogLen: uint64(len(log))}
	if err == nil {
		r.Status = 0
	}
	copy(out, log)
	if err != nil {
		return r, nil
	}
	c.programs[v.Program] = progObj{dev: dev, p: p}
	if blob := programInfo(dev, p); blob != nil {
		r.InfoLen = uint64(len(blob))
		if r.LogLen+r.InfoLen <= v.OutCap {
			copy(out[r.LogLen:], blob)
		}
	}
	return r, nil
}

// programInfo returns p's program-information blob, or nil when the device
// cannot give it (before ABI 1.4, or it failed).
func programInfo(dev *device, p driver.Program) []byte {
	if minor(dev) < 4 {
		return nil
	}
	info, err := dev.d.ProgramInfo(p)
	if err != nil {
		return nil
	}
	blob, err := info.Marshal()
	if err != nil {
		return nil
	}
	return blob
}

func (c *conn) doProgramFree(v *icdproto.ProgramFree) error {
	o, err := c.program(v.Program)
	if err != nil {
		return err
	}
	delete(c.programs, v.Program)
	return c.freeProgram(o)
}

func (c *conn) doProgramInfo(v *icdproto.ProgramInfo) (any, error) {
	o, err := c.program(v.Program)
	if err != nil {
		return nil, err
	}
	out, err := c.arenaRange(v.Arena, v.OutOffset, v.OutCap)
	if err != nil {
		return nil, err
	}
	if minor(o.dev) < 4 {
		return &icdproto.ProgramInfoReply{Status: uint32(abi.StatusInvalidOpcode)}, nil
	}
	info, err := o.dev.d.ProgramInfo(o.p)
	if err != nil {
		lost(o.dev, err)
		return &icdproto.ProgramInfoReply{Status: uint32(statusOf(err))}, nil
	}
	blob, err := info.Marshal()
	if err != nil {
		return &icdproto.ProgramInfoReply{Status: uint32(abi.StatusInternal)}, nil
	}
	if uint64(len(blob)) <= v.OutCap {
		copy(out, blob)
	}
	return &icdproto.ProgramInfoReply{InfoLen: uint64(len(blob))}, nil
}

func (c *conn) doLaunch(v *icdproto.Launch) error {
	o, err := c.program(v.Program)
	if err != nil {
		return err
	}
	kargs, printfID := v.KernelArgs()
	args := make([]driver.Arg, len(kargs))
	for i, a := range kargs {
		switch a.Kind {
		case abi.ArgBuffer:
			b, err := c.buffer(uint32(a.Value))
			if err != nil {
				return fmt.Errorf("argument %d: %w", i, err)
			}
			if b.dev != o.dev {
				return icdproto.Errorf(icdproto.ErrMalformed, "argument %d: buffer %d is on device %d, the program on %d", i, a.Value, b.dev.index, o.dev.index)
			}
			args[i] = driver.BufferArg(b.b)
		case abi.ArgScalar:
			args[i] = driver.BytesArg(v.ScalarBytes(a))
		case abi.ArgLocal:
			args[i] = driver.LocalArg(a.Size)
		case abi.ArgImage, abi.ArgSampler:
			if c.version < 4 {
				return icdproto.Errorf(icdproto.ErrVersion, "argument %d: an image or sampler in protocol version %d", i, c.version)
			}
			if a.Kind == abi.ArgSampler {
				s, _ := abi.UnpackSampler(a.Value) // validated
				args[i] = driver.SamplerArg(s)
				continue
			}
			im, _ := v.Image(a) // validated
			b, err := c.buffer(im.Buffer)
			if err != nil {
				return fmt.Errorf("argument %d: image: %w", i, err)
			}
			if b.dev != o.dev {
				return icdproto.Errorf(icdproto.ErrMalformed, "argument %d: image buffer %d is on device %d, the program on %d", i, im.Buffer, b.dev.index, o.dev.index)
			}
			args[i] = driver.ImageArg(b.b, im)
		}
	}
	var printf driver.Buffer
	if printfID != 0 {
		if c.version < 3 {
			return icdproto.Errorf(icdproto.ErrVersion, "a printf buffer in protocol version %d", c.version)
		}
		b, err := c.buffer(printfID)
		if err != nil {
			return fmt.Errorf("printf buffer: %w", err)
		}
		if b.dev != o.dev {
			return icdproto.Errorf(icdproto.ErrMalformed, "printf buffer %d is on device %d, the program on %d", printfID, b.dev.index, o.dev.index)
		}
		printf = b.b
	}
	r := driver.NDRange{Dims: v.WorkDim, Offset: v.GlobalOffset, Global: v.GlobalSize, Local: v.LocalSize}
	cm, err := c.begin(v.Event, true)
	if err != nil {
		return err
	}
	flags := uint16(v.Flags &^ icdproto.LaunchPrintf)
	if printf.Handle != 0 {
		return c.seal(cm, o.dev, o.dev.d.LaunchPrintfNotify(o.p, v.KernelName(), r, flags, printf, args, c.part(cm, o.dev)))
	}
	return c.seal(cm, o.dev, o.dev.d.LaunchNotify(o.p, v.KernelName(), r, flags, args, c.part(cm, o.dev)))
}

func (c *conn) doMarker(v *icdproto.Marker) error {
	cm, err := c.begin(v.Event, false)
	if err != nil {
		return err
	}
	for dev := range c.used {
		if dev.d.Pending() == 0 {
			continue // nothing of this connection (or anyone's) in flight there
		}
		if err := dev.d.Marker(c.part(cm, dev)); err != nil {
			return c.seal(cm, dev, err)
		}
	}
	return c.seal(cm, nil, nil)
}

// flush rings the doorbell of every device this connection used.
func (c *conn) flush() {
	for dev := range c.used {
		dev.d.Flush() //nolint:errcheck // a failing device fails the commands, which report it
		dev.kick()
	}
}

// reap reaps what has landed on the devices this connection used.
func (c *conn) reap() {
	for dev := range c.used {
		dev.d.Reap() //nolint:errcheck // as flush
	}
}

// waitFor waits until cond (called with c.mu held) holds, the timeout
// passes or the connection is stopped. It reports whether cond held. It
// rings the doorbells and wakes the devices' reapers (flush), looks for
// the completions itself for a bounded window (pollWait), then sleeps:
// the reapers reap the completions, whose callbacks signal c.wake (and
// arm the vGPU's completion interrupt while it sleeps, where it has one).
func (c *conn) waitFor(timeout time.Duration, stoppable bool, cond func() bool) bool {
	check := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return cond()
	}
	if check() {
		return true
	}
	c.flush()
	if c.pollWait(check) {
		return true
	}
	for dev := range c.used {
		dev.sleeping(true)
		defer dev.sleeping(false)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	quit := c.quit
	if !stoppable {
		quit = nil
	}
	for {
		select {
		case <-c.wake:
			if check() {
				return true
			}
		case <-t.C:
			return check()
		case <-quit:
			return check()
		}
	}
}

func (c *conn) doWait(block bool, v *icdproto.Wait) (any, error) {
	if len(v.Events) == 0 {
		return c.waitAll(block), nil
	}
	evs := make([]*event, len(v.Events))
	c.mu.Lock()
	for i, id := range v.Events {
		e, ok := c.events[id]
		if !ok {
			c.mu.Unlock()
			return nil, icdproto.Errorf(icdproto.ErrUnknownID, "event %d", id)
		}
		evs[i] = e
	}
	c.mu.Unlock()
	all := func() bool {
		for _, e := range evs {
			if !e.done {
				return false
			}
		}
		return true
	}
	if block {
		c.waitFor(c.s.cfg.Timeout, true, all)
	} else {
		c.flush()
		c.reap()
	}
	r := &icdproto.WaitReply{Events: make([]icdproto.EventRecord, len(evs))}
	c.mu.Lock()
	for i, e := range evs {
		r.Events[i] = e.record()
		if e.done && !e.reported {
			e.reported = true
			delete(c.events, e.id)
		}
	}
	c.mu.Unlock()
	return r, nil
}

// waitAll answers a Wait (block) or Poll of count 0.
func (c *conn) waitAll(block bool) *icdproto.WaitReply {
	if block {
		c.waitFor(c.s.cfg.Timeout, true, func() bool { return c.inflight == 0 })
	} else {
		c.flush()
		c.reap()
	}
	r := &icdproto.WaitReply{}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for ; k < len(c.order) && len(r.Events) < icdproto.MaxWaitEvents; k++ {
		e := c.order[k]
		if e.reported {
			continue
		}
		r.Events = append(r.Events, e.record())
		e.reported = true
		delete(c.events, e.id)
	}
	clear(c.order[:k])
	c.order = c.order[k:]
	for _, e := range c.order {
		if !e.reported {
			r.Pending++
		}
	}
	return r
}

// cleanup runs when the connection ends: it waits for the connection's
// commands, frees its buffers and programs and unmaps its arenas.
func (c *conn) cleanup() {
	c.stop()
	idle := func() bool { return c.inflight == 0 }
	drained := c.waitFor(c.s.cfg.Timeout, false, idle)
	nb, np := len(c.buffers), len(c.programs)
	for id, o := range c.buffers {
		c.freeBuffer(o) //nolint:errcheck // a failed free only matters to this connection, which is gone
		delete(c.buffers, id)
	}
	for id, o := range c.programs {
		c.freeProgram(o) //nolint:errcheck // as above
		delete(c.programs, id)
	}
	if nb+np > 0 {
		drained = c.waitFor(c.s.cfg.Timeout, false, idle) && drained
	}
	// The connection's device contexts end: once destroyed, the device
	// writes nothing more into its arenas, drained or not.
	shared := false
	for base, d := range c.ctxs {
		if d.parent == nil {
			shared = true
			continue
		}
		if err := c.s.closeContext(d); err != nil {
			c.log.Warn("icd client's device context", "device", base.index, "context", d.ctxID, "err", err)
			shared = true // not known to be destroyed: keep the arenas
		}
		delete(c.used, d)
	}
	clear(c.ctxs)
	drained = drained || !shared
	if !drained {
		// A read may still copy into an arena when it completes: keep the
		// mappings rather than fault.
		c.log.Error("icd client's commands did not complete: its arenas stay mapped", "timeout", c.s.cfg.Timeout)
	} else {
		for id, m := range c.arenas {
			if err := unmapArena(m); err != nil {
				c.log.Warn("icd unmap", "arena", id, "err", err)
			}
		}
	}
	clear(c.arenas)
	if c.queueMap != nil {
		// Only this goroutine reads the queue; devices never do.
		if err := unmapArena(c.queueMap); err != nil {
			c.log.Warn("icd unmap queue", "err", err)
		}
		c.queue, c.queueMap = nil, nil
	}
	// Drop the tables themselves (clear keeps a map's storage): the
	// connection stays in the server's set until serve returns.
	c.mu.Lock()
	held, peak := len(c.events), c.peak
	c.events, c.order = map[uint64]*event{}, nil
	c.mu.Unlock()
	c.arenas, c.buffers, c.programs = map[uint32][]byte{}, map[uint32]bufObj{}, map[uint32]progObj{}
	if peak >= trimEvents {
		c.s.requestTrim()
	}
	c.log.Info("icd client disconnected", "buffers_freed", nb, "programs_freed", np, "events_dropped", held, "events_peak", peak)
}
