package remote

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/gpu"
)

// Device is a gpu.Device served by an executor over a connection. Calls
// from several goroutines go out concurrently (each queue's in order); a
// connection that ends or a reply that breaks the protocol loses the
// device: that call and every later one fail with an error that is
// gpu.ErrContextLost and names the cause.
type Device struct {
	conn io.ReadWriteCloser
	info gpu.Info

	wmu sync.Mutex // serialises requests

	mu      sync.Mutex // guards what follows
	seq     uint32
	pending map[uint32]*waiting
	lost    error // set once: the cause
	done    chan struct{}
	watch   *Watchdog

	arena *arena // shared buffer memory (arena.go); nil: none
}

// waiting is a request that has not had its reply.
type waiting struct {
	ch         chan frame
	op         Op
	timer      *time.Timer // the watchdog's, if it bounds the request
	pause      uint64      // Watchdog.Paused when the timer was armed
	confirming bool        // the bound ran out; the timer runs the confirmation
}

// Watchdog bounds how long the executor may leave a request unanswered
// (docs/isolation.md "Executors"): a stopped or hung executor, or one
// that sent part of a reply and no more, would otherwise hold its
// caller, and whatever device turn the caller holds, for good. A request
// unanswered for its Bound, and then for a tenth of it more (the
// confirmation, in which a pause that ended just before the bound ran
// out is counted: a process continued runs its timers before it hears
// of its SIGCONT), loses the device (gpu.ErrContextLost, the cause
// naming the request) and calls Expired, with which the caller ends the
// executor. A reply whose frame arrives only in part is unanswered until
// its last byte.
type Watchdog struct {
	// Bound is how long a request of op may wait for its whole reply;
	// 0: unbounded.
	Bound func(op Op) time.Duration
	// Paused, if set, is a counter that changes whenever the caller's
	// own clock stood still (its process was stopped: a preemption stops
	// the executor with it). A request whose bound ran out across such a
	// change is given its whole bound again, from then: the executor
	// may have been stopped for all of it.
	Paused func() uint64
	// Expired is told which request ran out of time, once, after the
	// device was marked lost.
	Expired func(op Op, waited time.Duration)
}

// SetWatchdog bounds the requests sent from now on by w.
func (d *Device) SetWatchdog(w *Watchdog) {
	d.mu.Lock()
	d.watch = w
	d.mu.Unlock()
}

// arm starts the watchdog's timer for request seq; caller holds d.mu.
func (d *Device) arm(seq uint32, w *waiting) {
	if d.watch == nil || d.watch.Bound == nil {
		return
	}
	bound := d.watch.Bound(w.op)
	if bound <= 0 {
		return
	}
	if d.watch.Paused != nil {
		w.pause = d.watch.Paused()
	}
	start := time.Now()
	w.timer = time.AfterFunc(bound, func() { d.expire(seq, bound, start) })
}

// confirmation is how long a request that waited its bound is watched
// more before it is given up (Watchdog).
func confirmation(bound time.Duration) time.Duration {
	return min(max(bound/10, 10*time.Millisecond), 2*time.Second)
}

// expire runs when request seq waited its bound, and again after the
// confirmation.
func (d *Device) expire(seq uint32, bound time.Duration, start time.Time) {
	d.mu.Lock()
	w, ok := d.pending[seq]
	if !ok || d.lost != nil {
		d.mu.Unlock()
		return
	}
	if d.watch.Paused != nil {
		if p := d.watch.Paused(); p != w.pause {
			// Stopped meanwhile: the whole bound again, from now.
			w.pause, w.confirming = p, false
			w.timer.Reset(bound)
			d.mu.Unlock()
			return
		}
	}
	if !w.confirming {
		w.confirming = true
		w.timer.Reset(confirmation(bound))
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	waited := time.Since(start)
	d.lose(fmt.Errorf("%w: no whole reply to op %d within %v", ErrUnanswered, w.op, bound))
	d.conn.Close()
	if d.watch.Expired != nil {
		d.watch.Expired(w.op, waited)
	}
}

// NewDevice starts reading replies on conn and asks the executor for its
// device's description. Close ends the executor and closes conn.
func NewDevice(conn io.ReadWriteCloser) (*Device, error) {
	d := &Device{conn: conn, pending: map[uint32]*waiting{}, done: make(chan struct{})}
	go d.readLoop()
	body, err := d.call(OpInfo, nil)
	if err != nil {
		conn.Close()
		<-d.done
		return nil, fmt.Errorf("executor: info: %w", err)
	}
	if err := json.Unmarshal(body, &d.info); err != nil {
		d.lose(fmt.Errorf("%w: info: %v", ErrProtocol, err))
		conn.Close()
		<-d.done
		return nil, fmt.Errorf("executor: info: %w", d.lostErr())
	}
	return d, nil
}

// readLoop delivers replies until the connection ends or breaks the
// protocol.
func (d *Device) readLoop() {
	defer close(d.done)
	r := bufio.NewReaderSize(d.conn, 64<<10)
	for {
		f, err := readFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("executor gone: %v", err)
			}
			d.lose(err)
			return
		}
		d.mu.Lock()
		w, ok := d.pending[f.seq]
		delete(d.pending, f.seq)
		if ok && w.timer != nil {
			w.timer.Stop()
		}
		d.mu.Unlock()
		if !ok {
			d.lose(fmt.Errorf("%w: reply to request %d, which is not waiting", ErrProtocol, f.seq))
			d.conn.Close()
			return
		}
		w.ch <- f
	}
}

// lose records the first cause of the device's loss and fails every
// waiting call.
func (d *Device) lose(cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost == nil {
		d.lost = fmt.Errorf("%w: %w", gpu.ErrContextLost, cause)
	}
	for seq, w := range d.pending {
		if w.timer != nil {
			w.timer.Stop()
		}
		close(w.ch)
		delete(d.pending, seq)
	}
}

func (d *Device) lostErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

// request sends a request and returns the channel its reply comes on
// (closed if the device is lost first).
func (d *Device) request(op Op, body []byte) (chan frame, error) {
	return d.requestTail(op, body, nil)
}

// requestTail is request with tail appended to body on the wire: a
// write's bytes go from the caller's slice to the socket without being
// copied into the frame first (issue 42).
func (d *Device) requestTail(op Op, body, tail []byte) (chan frame, error) {
	ch := make(chan frame, 1)
	d.mu.Lock()
	if d.lost != nil {
		d.mu.Unlock()
		return nil, d.lost
	}
	d.seq++
	seq := d.seq
	w := &waiting{ch: ch, op: op}
	d.pending[seq] = w
	d.arm(seq, w)
	d.mu.Unlock()
	out := appendFrameHeader(make([]byte, 0, 9+len(body)), seq, uint8(op), len(body)+len(tail))
	out = append(out, body...)
	d.wmu.Lock()
	var err error
	if len(tail) == 0 {
		_, err = d.conn.Write(out)
	} else {
		// Two writes under wmu are one frame on the stream; a
		// net.Conn makes them one writev.
		bufs := net.Buffers{out, tail}
		_, err = bufs.WriteTo(d.conn)
	}
	d.wmu.Unlock()
	if err != nil {
		d.lose(fmt.Errorf("executor gone: send: %v", err))
		d.conn.Close()
	}
	return ch, nil
}

// call sends a request and waits for its reply: the body on success, an
// *Error (with the log for a build) on an error reply.
func (d *Device) call(op Op, body []byte) ([]byte, error) {
	b, _, err := d.callLog(op, body)
	return b, err
}

func (d *Device) callLog(op Op, body []byte) ([]byte, string, error) {
	return d.callTail(op, body, nil)
}

// callTail is callLog with tail appended to body on the wire.
func (d *Device) callTail(op Op, body, tail []byte) ([]byte, string, error) {
	if len(body)+len(tail)+5 > MaxFrame {
		return nil, "", fmt.Errorf("request of %d bytes: %w", len(body)+len(tail), gpu.ErrInvalidArgument)
	}
	ch, err := d.requestTail(op, body, tail)
	if err != nil {
		return nil, "", err
	}
	f, ok := <-ch
	if !ok {
		return nil, "", d.lostErr()
	}
	if f.code != 0 {
		err, log := decodeError(errKind(f.code), f.body)
		if errors.Is(err, ErrProtocol) && !errors.As(err, new(*Error)) {
			d.lose(err)
			d.conn.Close()
			return nil, "", d.lostErr()
		}
		return nil, log, err
	}
	return f.body, "", nil
}

// broken loses the device for a reply that breaks the protocol.
func (d *Device) broken(op Op, err error) error {
	d.lose(fmt.Errorf("reply to op %d: %w", op, err))
	d.conn.Close()
	return d.lostErr()
}

// Info returns the executor's device description, read once.
func (d *Device) Info() gpu.Info { return d.info }

// NewQueue creates a queue in the executor.
func (d *Device) NewQueue() (gpu.Queue, error) {
	body, err := d.call(OpNewQueue, nil)
	if err != nil {
		return nil, err
	}
	r := newDec(body)
	h := r.U32()
	if err := r.done(); err != nil || h == 0 {
		return nil, d.broken(OpNewQueue, errors.Join(err, fmt.Errorf("%w: handle 0", ErrProtocol)))
	}
	return &Queue{d: d, h: h, arenaBufs: map[uint32]extent{}}, nil
}

// Close ends the executor (it closes its device and exits) and the
// connection. Calls after it fail.
func (d *Device) Close() error {
	_, err := d.call(OpClose, nil)
	d.lose(errors.New("closed"))
	d.conn.Close()
	<-d.done
	if d.arena != nil {
		// The executor is gone or going: nothing of it uses the arena
		// through this mapping, and no copy of this side does once
		// unmap has the lock.
		err = errors.Join(err, d.arena.unmap())
	}
	if errors.Is(err, gpu.ErrContextLost) {
		return nil // already gone
	}
	return err
}

// Queue is a queue in the executor.
type Queue struct {
	d      *Device
	h      uint32
	closed atomic.Bool
	// The launches Enqueue batched for the next Sync (the queue is used
	// by one goroutine at a time, as every gpu.Queue).
	batch   *enc
	batched int
	// run is held while a request of the queue may run on its buffers in
	// the executor (a launch, a batch, a copy, a fill) and while the
	// client copies to or from the arena: the two never overlap.
	run sync.Mutex
	// amu guards arenaBufs: the arena ranges of the queue's live
	// buffers, by handle.
	amu       sync.Mutex
	arenaBufs map[uint32]extent
}

func (q *Queue) body() *enc {
	e := &enc{}
	e.U32(q.h)
	return e
}

// call is d.call for a queue that is still open.
func (q *Queue) call(op Op, e *enc) ([]byte, error) {
	if q.closed.Load() {
		return nil, fmt.Errorf("queue: %w", gpu.ErrClosed)
	}
	return q.d.call(op, e.B)
}

// callRun is call for a request that may run on the queue's buffers in
// the executor: no arena copy of the queue overlaps it.
func (q *Queue) callRun(op Op, e *enc) ([]byte, error) {
	q.run.Lock()
	defer q.run.Unlock()
	return q.call(op, e)
}

// handle decodes a reply that is one handle.
func (q *Queue) handle(op Op, body []byte) (uint32, error) {
	r := newDec(body)
	h := r.U32()
	if err := r.done(); err != nil {
		return 0, q.d.broken(op, err)
	}
	if h == 0 {
		return 0, q.d.broken(op, fmt.Errorf("%w: handle 0", ErrProtocol))
	}
	return h, nil
}

// buffer returns b's handle if it is a live Buffer of q.
func (q *Queue) buffer(b gpu.Buffer) (uint32, error) {
	rb, ok := b.(*Buffer)
	if !ok || rb.q != q {
		return 0, fmt.Errorf("buffer: %w", gpu.ErrForeign)
	}
	if rb.released.Load() {
		return 0, fmt.Errorf("buffer: %w", gpu.ErrClosed)
	}
	return rb.h, nil
}

// Alloc allocates a zeroed buffer: in the arena where it can, else in
// the executor's own memory.
func (q *Queue) Alloc(size uint64) (gpu.Buffer, error) {
	if b, ok, err := q.allocArena(size); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	e := q.body()
	e.U64(size)
	body, err := q.call(OpAlloc, e)
	if err != nil {
		return nil, err
	}
	h, err := q.handle(OpAlloc, body)
	if err != nil {
		return nil, err
	}
	return &Buffer{q: q, h: h, size: size}, nil
}

// Write copies p into b at off: a memory copy for a buffer in the arena,
// else Chunk bytes a request, each sent from p itself.
func (q *Queue) Write(b gpu.Buffer, off uint64, p []byte) error {
	if done, err := q.viaArena(b, off, p, true); done || err != nil {
		return err
	}
	return q.chunked(b, off, p, func(e *enc, part []byte) (Op, []byte, func([]byte) error) {
		return OpWrite, part, func(body []byte) error { return q.empty(OpWrite, body, nil) }
	})
}

// Read copies len(p) bytes of b at off into p: a memory copy for a
// buffer in the arena, else Chunk bytes a request.
func (q *Queue) Read(b gpu.Buffer, off uint64, p []byte) error {
	if done, err := q.viaArena(b, off, p, false); done || err != nil {
		return err
	}
	return q.chunked(b, off, p, func(e *enc, part []byte) (Op, []byte, func([]byte) error) {
		e.U32(uint32(len(part)))
		return OpRead, nil, func(body []byte) error {
			if len(body) != len(part) {
				return q.d.broken(OpRead, fmt.Errorf("%w: %d bytes read, %d asked", ErrProtocol, len(body), len(part)))
			}
			copy(part, body)
			putBody(body)
			return nil
		}
	})
}

// viaArena is Write's or Read's memory copy of a buffer in the arena;
// done is false where it must go over the socket.
func (q *Queue) viaArena(b gpu.Buffer, off uint64, p []byte, write bool) (done bool, err error) {
	rb, ok := b.(*Buffer)
	if !ok || !rb.arena || q.closed.Load() {
		return false, nil
	}
	if _, err := q.buffer(b); err != nil {
		return false, err
	}
	op, copyFn := "read", func(m []byte) { copy(p, m) }
	if write {
		op, copyFn = "write", func(m []byte) { copy(m, p) }
	}
	if err := rb.span(op, off, uint64(len(p))); err != nil {
		return false, err
	}
	q.run.Lock()
	defer q.run.Unlock()
	return rb.lend(off, uint64(len(p)), copyFn), nil
}

// chunked makes one request per Chunk of p (at least one, for an empty
// p): the buffer's handle and offset, then what add appends; add returns
// the request's op, the bytes that follow the body on the wire (sent from
// where they are, not copied into it) and what checks its reply.
func (q *Queue) chunked(b gpu.Buffer, off uint64, p []byte, add func(e *enc, part []byte) (Op, []byte, func([]byte) error)) error {
	h, err := q.buffer(b)
	if err != nil {
		return err
	}
	for first := true; first || len(p) > 0; first = false {
		part := p[:min(len(p), Chunk)]
		e := q.body()
		e.U32(h)
		e.U64(off)
		op, tail, check := add(e, part)
		if q.closed.Load() {
			return fmt.Errorf("queue: %w", gpu.ErrClosed)
		}
		body, _, err := q.d.callTail(op, e.B, tail)
		if err != nil {
			return err
		}
		if err := check(body); err != nil {
			return err
		}
		p, off = p[len(part):], off+uint64(len(part))
	}
	return nil
}

// empty checks a reply that must have no body.
func (q *Queue) empty(op Op, body []byte, err error) error {
	if err == nil && len(body) != 0 {
		return q.d.broken(op, fmt.Errorf("%w: %d bytes of reply", ErrProtocol, len(body)))
	}
	return err
}

// Copy copies n bytes on the device.
func (q *Queue) Copy(src, dst gpu.Buffer, srcOff, dstOff, n uint64) error {
	sh, err1 := q.buffer(src)
	dh, err2 := q.buffer(dst)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	e := q.body()
	e.U32(sh)
	e.U32(dh)
	e.U64(srcOff)
	e.U64(dstOff)
	e.U64(n)
	body, err := q.callRun(OpCopy, e)
	return q.empty(OpCopy, body, err)
}

// Fill writes pattern over n bytes of b at off.
func (q *Queue) Fill(b gpu.Buffer, off, n uint64, pattern []byte) error {
	h, err := q.buffer(b)
	if err != nil {
		return err
	}
	if len(pattern) > math.MaxUint8 {
		return fmt.Errorf("fill pattern of %d bytes: %w", len(pattern), gpu.ErrInvalidArgument)
	}
	e := q.body()
	e.U32(h)
	e.U64(off)
	e.U64(n)
	e.U8(uint8(len(pattern)))
	e.Raw(pattern)
	body, err := q.callRun(OpFill, e)
	return q.empty(OpFill, body, err)
}

// Build compiles source in the executor.
func (q *Queue) Build(source, options string) (gpu.Program, string, error) {
	return q.build(OpBuild, "program source", source, options)
}

// BuildIL builds a program from a SPIR-V module in the executor, which
// checks it (gpu.CheckIL). A device without SPIR-V (Info().Caps.IL false)
// is not asked: the error is gpu.ErrUnsupported.
func (q *Queue) BuildIL(module []byte, options string) (gpu.Program, string, error) {
	if !q.d.info.Caps.IL {
		return nil, "", fmt.Errorf("build: SPIR-V on %s: %w", q.d.info.Name, gpu.ErrUnsupported)
	}
	return q.build(OpBuildIL, "SPIR-V module", string(module), options)
}

// build sends OpBuild or OpBuildIL (op) with src, named what in errors.
func (q *Queue) build(op Op, what, src, options string) (gpu.Program, string, error) {
	if err := errors.Join(checkString(what, src, MaxFrame-64), checkString("build options", options, MaxFrame-64)); err != nil {
		return nil, "", err
	}
	if q.closed.Load() {
		return nil, "", fmt.Errorf("queue: %w", gpu.ErrClosed)
	}
	e := q.body()
	e.s32(src)
	e.s32(options)
	body, log, err := q.d.callLog(op, e.B)
	if err != nil {
		return nil, log, err
	}
	r := newDec(body)
	h, log := r.U32(), r.s32()
	if err := r.done(); err != nil || h == 0 {
		return nil, "", q.d.broken(op, errors.Join(err, fmt.Errorf("%w: program handle %d", ErrProtocol, h)))
	}
	return &Program{q: q, h: h}, log, nil
}

// Launch runs k over r with args in the executor.
func (q *Queue) Launch(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	e := q.body()
	if err := q.appendLaunch(e, k, r, args); err != nil {
		return 0, err
	}
	body, err := q.callRun(OpLaunch, e)
	if err != nil {
		return 0, err
	}
	rd := newDec(body)
	ns := rd.U64()
	if err := rd.done(); err != nil {
		return 0, q.d.broken(OpLaunch, err)
	}
	if ns > math.MaxInt64 {
		return 0, q.d.broken(OpLaunch, fmt.Errorf("%w: kernel time %d ns", ErrProtocol, ns))
	}
	return time.Duration(ns), nil
}

// LaunchPrinting is Launch that returns what the kernel printed
// (gpu.Printer): at most max bytes (MaxPrintout at most), and how many
// more were dropped. A server without an output capture refuses it with
// gpu.ErrUnsupported, before launching.
func (q *Queue) LaunchPrinting(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, max int) (time.Duration, gpu.Printout, error) {
	var out gpu.Printout
	max = min(max, MaxPrintout)
	if max < 0 {
		return 0, out, fmt.Errorf("launch printing at most %d bytes: %w", max, gpu.ErrInvalidLaunch)
	}
	e := q.body()
	e.U32(uint32(max))
	if err := q.appendLaunch(e, k, r, args); err != nil {
		return 0, out, err
	}
	body, err := q.callRun(OpLaunchPrinting, e)
	if err != nil {
		return 0, out, err
	}
	rd := newDec(body)
	ns, dropped := rd.U64(), rd.U64()
	data := rd.Rest()
	if err := rd.done(); err != nil {
		return 0, out, q.d.broken(OpLaunchPrinting, err)
	}
	if ns > math.MaxInt64 || len(data) > max {
		return 0, out, q.d.broken(OpLaunchPrinting, fmt.Errorf("%w: kernel time %d ns, %d bytes printed of at most %d", ErrProtocol, ns, len(data), max))
	}
	out.Data = append([]byte(nil), data...)
	out.Dropped = dropped
	return time.Duration(ns), out, nil
}

// appendLaunch appends a launch's kernel, NDRange and arguments (OpLaunch's
// body after the queue handle).
func (q *Queue) appendLaunch(e *enc, k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) error {
	rk, ok := k.(*Kernel)
	if !ok || rk.p.q != q {
		return fmt.Errorf("kernel: %w", gpu.ErrForeign)
	}
	if rk.released.Load() {
		return fmt.Errorf("kernel: %w", gpu.ErrClosed)
	}
	if len(args) > maxArgs || r.Dims < 0 || r.Dims > math.MaxUint8 {
		return fmt.Errorf("launch of %d arguments, %d dimensions: %w", len(args), r.Dims, gpu.ErrInvalidLaunch)
	}
	e.U32(rk.h)
	e.ndrange(r)
	e.U16(uint16(len(args)))
	for i, a := range args {
		switch {
		case a.Buffer != nil:
			h, err := q.buffer(a.Buffer)
			if err != nil {
				return fmt.Errorf("argument %d: %w", i, err)
			}
			if im := a.Image; im != nil {
				e.U8(argImage)
				e.U32(h)
				e.U32(im.Type)
				e.U32(im.Order)
				e.U32(im.DataType)
				e.U64(im.Width)
				e.U64(im.Height)
				e.U64(im.Depth)
				e.U64(im.ArraySize)
				continue
			}
			e.U8(argBuffer)
			e.U32(h)
		case a.Sampler != nil:
			e.U8(argSampler)
			norm := uint8(0)
			if a.Sampler.Normalized {
				norm = 1
			}
			e.U8(norm)
			e.U32(a.Sampler.Addressing)
			e.U32(a.Sampler.Filter)
		case a.Scalar != nil:
			if len(a.Scalar) > math.MaxUint16 {
				return fmt.Errorf("argument %d: scalar of %d bytes: %w", i, len(a.Scalar), gpu.ErrInvalidLaunch)
			}
			e.U8(argScalar)
			e.U16(uint16(len(a.Scalar)))
			e.Raw(a.Scalar)
		default:
			e.U8(argLocal)
			e.U64(a.Local)
		}
	}
	return nil
}

// ErrBatchFull is Enqueue's error when the batch has MaxBatch launches or
// no room in a frame: Sync first.
var ErrBatchFull = fmt.Errorf("executor launch batch full: %w", gpu.ErrInvalidLaunch)

// Enqueue adds a launch to the queue's batch (gpu.Pipeliner). Nothing is
// sent: Sync sends the batch as one OpLaunches frame, so a run of launches
// costs the executor one round trip, and the executor enqueues them
// behind each other on its device.
func (q *Queue) Enqueue(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) error {
	if q.closed.Load() {
		return fmt.Errorf("queue: %w", gpu.ErrClosed)
	}
	if q.batched >= MaxBatch {
		return ErrBatchFull
	}
	if q.batch == nil {
		q.batch = q.body()
		q.batch.U16(0) // the count, set by Sync
	}
	mark := len(q.batch.B)
	if err := q.appendLaunch(q.batch, k, r, args); err != nil {
		q.batch.B = q.batch.B[:mark]
		return err
	}
	if len(q.batch.B)+5 > MaxFrame {
		q.batch.B = q.batch.B[:mark]
		return ErrBatchFull
	}
	q.batched++
	return nil
}

// Sync sends the batch and returns each launch's outcome (gpu.Pipeliner).
func (q *Queue) Sync() []gpu.LaunchResult {
	n := q.batched
	if n == 0 {
		return nil
	}
	e := q.batch
	q.batch, q.batched = nil, 0
	binary.LittleEndian.PutUint16(e.B[4:], uint16(n))
	body, err := q.callRun(OpLaunches, e)
	var res []gpu.LaunchResult
	if err == nil {
		if res, err = decodeResults(body, n); err != nil {
			err = q.d.broken(OpLaunches, err)
		}
	}
	if err != nil {
		res = make([]gpu.LaunchResult, n)
		for i := range res {
			res[i].Err = err
		}
	}
	return res
}

var _ gpu.Pipeliner = (*Queue)(nil)

// Close closes the queue in the executor, with its objects.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	e := q.body()
	body, err := q.d.call(OpCloseQueue, e.B)
	q.amu.Lock()
	exts := q.arenaBufs
	q.arenaBufs = nil
	q.amu.Unlock()
	letGo, err := q.letGo(OpCloseQueue, body, err)
	q.returnRanges(letGo, slices.Collect(maps.Values(exts))...)
	return err
}

// letGo decodes OpRelease's and OpCloseQueue's reply: whether the
// executor's runtime let go of the arena memory of what was released.
func (q *Queue) letGo(op Op, body []byte, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	r := newDec(body)
	v := r.U8()
	if err := r.done(); err != nil || v > 1 {
		return false, q.d.broken(op, errors.Join(err, fmt.Errorf("%w: let-go flag %d", ErrProtocol, v)))
	}
	return v == 1, nil
}

// returnRanges gives arena ranges back for reuse once the executor's
// runtime let go of them; otherwise (or on a lost device, where the
// executor may still run) they are kept out of use.
func (q *Queue) returnRanges(letGo bool, exts ...extent) {
	for _, e := range exts {
		if letGo {
			q.d.arena.give(e)
		} else {
			q.d.arena.keep(e)
		}
	}
}

// release releases object h of kind what; a lost device or closed queue
// has released it already. A buffer's arena range is reused only once
// the executor said its runtime let go of it.
func (q *Queue) release(what uint8, h uint32) {
	if q.closed.Load() {
		return
	}
	e := q.body()
	e.U8(what)
	e.U32(h)
	body, err := q.d.call(OpRelease, e.B)
	letGo, _ := q.letGo(OpRelease, body, err)
	if what != relBuffer {
		return
	}
	q.amu.Lock()
	ext, ok := q.arenaBufs[h]
	delete(q.arenaBufs, h)
	q.amu.Unlock()
	if ok {
		q.returnRanges(letGo, ext)
	}
}

// Buffer is a buffer in the executor.
type Buffer struct {
	q        *Queue
	h        uint32
	size     uint64
	released atomic.Bool
	arena    bool   // the buffer is in the arena, at ext
	ext      extent // immutable
}

// Size returns the size Alloc was given.
func (b *Buffer) Size() uint64 { return b.size }

// Release frees the buffer in the executor (once).
func (b *Buffer) Release() {
	if !b.released.Swap(true) {
		b.q.release(relBuffer, b.h)
	}
}

// Program is a program built in the executor.
type Program struct {
	q        *Queue
	h        uint32
	released atomic.Bool

	mu      sync.Mutex
	kernels map[string]*Kernel // by name: Kernel returns the same one, as package gpu's does
}

func (p *Program) call(op Op, name string) ([]byte, error) {
	if p.released.Load() {
		return nil, fmt.Errorf("program: %w", gpu.ErrClosed)
	}
	e := p.q.body()
	e.U32(p.h)
	if op == OpKernel {
		e.s16(name)
	}
	return p.q.call(op, e)
}

// Kernel returns the kernel called name: one request the first time, the
// same Kernel after (callers look a kernel up at every launch).
func (p *Program) Kernel(name string) (gpu.Kernel, error) {
	if err := checkString("kernel name", name, math.MaxUint16); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.kernels[name]; ok && !k.released.Load() {
		return k, nil
	}
	body, err := p.call(OpKernel, name)
	if err != nil {
		return nil, err
	}
	r := newDec(body)
	h, n := r.U32(), r.U32()
	if err := r.done(); err != nil || h == 0 || n > maxArgs {
		return nil, p.q.d.broken(OpKernel, errors.Join(err, fmt.Errorf("%w: kernel handle %d, %d arguments", ErrProtocol, h, n)))
	}
	k := &Kernel{p: p, h: h, name: name, args: int(n)}
	if p.kernels == nil {
		p.kernels = map[string]*Kernel{}
	}
	p.kernels[name] = k
	return k, nil
}

// KernelNames lists the program's kernels; nil if the executor could not
// say.
func (p *Program) KernelNames() []string {
	body, err := p.call(OpKernelNames, "")
	if err != nil {
		return nil
	}
	r := newDec(body)
	n := r.U32()
	if n > maxNames {
		p.q.d.broken(OpKernelNames, fmt.Errorf("%w: %d kernel names", ErrProtocol, n))
		return nil
	}
	var names []string
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		names = append(names, r.s16())
	}
	if err := r.done(); err != nil {
		p.q.d.broken(OpKernelNames, err)
		return nil
	}
	return names
}

// Info describes the program's kernels.
func (p *Program) Info() ([]gpu.KernelInfo, error) {
	body, err := p.call(OpProgramInfo, "")
	if err != nil {
		return nil, err
	}
	var info []gpu.KernelInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, p.q.d.broken(OpProgramInfo, fmt.Errorf("%w: %v", ErrProtocol, err))
	}
	return info, nil
}

// Release frees the program in the executor (once).
func (p *Program) Release() {
	if !p.released.Swap(true) {
		p.q.release(relProgram, p.h)
	}
}

// Kernel is a kernel in the executor.
type Kernel struct {
	p        *Program
	h        uint32
	name     string
	args     int
	released atomic.Bool
}

// Name returns the kernel's name.
func (k *Kernel) Name() string { return k.name }

// NumArgs returns the kernel's parameter count.
func (k *Kernel) NumArgs() int { return k.args }

// Release frees the kernel in the executor (once).
func (k *Kernel) Release() {
	if !k.released.Swap(true) {
		k.p.q.release(relKernel, k.h)
	}
}
