package remote

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/vgpud/vgpud/gpu"
)

// Serve answers the executor protocol on conn with dev until the client
// hangs up (nil), sends OpClose (nil) or breaks the framing (an error
// wrapping ErrProtocol). A request whose body does not decode is answered
// with a kindProtocol error and serving goes on. Every queue is closed on
// return; dev is closed only by OpClose.
func Serve(conn io.ReadWriter, dev gpu.Device) error { return ServeArena(conn, dev, nil) }

// ServeArena is Serve with an arena: memory the client maps too
// (MapArena), on which OpAllocAt makes buffers (arena.go). nil: none,
// and OpAllocAt is refused as unsupported.
func ServeArena(conn io.ReadWriter, dev gpu.Device, arena []byte) error {
	return ServeWith(conn, dev, ServeOptions{Arena: arena})
}

// Output is where a server finds what its device's kernels printed: the
// process's captured standard output (worker/child/kernelout).
type Output interface {
	// Discard drops what was printed so far.
	Discard() error
	// Take returns what was printed since the last Take or Discard, at
	// most n bytes, and how many more bytes were printed and dropped.
	Take(n int) ([]byte, uint64, error)
}

// ServeOptions are what a server may have besides its device.
type ServeOptions struct {
	// Arena: ServeArena's.
	Arena []byte
	// Output, if not nil, answers OpLaunchPrinting: what a launch
	// printed is what Output took between the launch's start and end.
	// Queues of the device running kernels at the same time print into
	// the same output; an executor serves one queue. nil:
	// OpLaunchPrinting is refused as unsupported.
	Output Output
}

// ServeWith is Serve with opts.
func ServeWith(conn io.ReadWriter, dev gpu.Device, opts ServeOptions) error {
	s := &server{dev: dev, w: conn, arena: opts.Arena, out: opts.Output, queues: map[uint32]*squeue{}, objs: map[uint32]sobj{}}
	r := bufio.NewReaderSize(conn, 64<<10)
	defer s.closeQueues()
	for {
		f, err := readFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if Op(f.code) == OpClose {
			s.closeQueues()
			err := dev.Close()
			s.reply(f.seq, nil, err, "")
			return nil
		}
		s.dispatch(f)
	}
}

// server is Serve's state.
type server struct {
	dev   gpu.Device
	arena []byte // shared with the client; nil: none
	out   Output // nil: none (OpLaunchPrinting unsupported)

	wmu sync.Mutex // serialises replies
	w   io.Writer

	mu     sync.Mutex // guards what follows
	next   uint32     // the last handle given out
	queues map[uint32]*squeue
	objs   map[uint32]sobj // buffers, programs and kernels by handle
	wg     sync.WaitGroup  // queue goroutines
}

// squeue is one queue. Its requests run in order: on the read loop
// itself while nothing of the queue waits on its goroutine, else on the
// goroutine; a build always goes to the goroutine, so that a long
// compile holds up no other queue's requests. (A handoff between
// goroutines costs wakeups that, on a loaded host, were most of a
// request's latency.)
type squeue struct {
	q    gpu.Queue
	reqs chan frame
	busy atomic.Int32 // requests sent to the goroutine and not yet answered
}

// sobj is a buffer, program or kernel of queue q.
type sobj struct {
	q    uint32
	what uint8 // relBuffer, relProgram, relKernel
	buf  gpu.Buffer
	prog gpu.Program
	kern gpu.Kernel
	// on made buf on the arena (OpAllocAt); nil for any other object.
	on gpu.HostAllocator
}

// release releases the object and reports whether the runtime let go of
// its arena memory (true for an object not on the arena).
func (ob sobj) release() bool {
	switch ob.what {
	case relBuffer:
		if ob.on != nil {
			return ob.on.ReleaseOn(ob.buf)
		}
		ob.buf.Release()
	case relProgram:
		ob.prog.Release()
	case relKernel:
		ob.kern.Release()
	}
	return true
}

// letGoBody is OpRelease's and OpCloseQueue's reply.
func letGoBody(letGo bool) []byte {
	if letGo {
		return []byte{1}
	}
	return []byte{0}
}

// handle returns a new handle, or 0 once they ran out.
func (s *server) handle() uint32 {
	if s.next == ^uint32(0) {
		return 0
	}
	s.next++
	return s.next
}

// reply sends a reply: body on success, else err's kind and message with
// log.
func (s *server) reply(seq uint32, body []byte, err error, log string) {
	code := uint8(0)
	if err != nil {
		code, body = uint8(kindOf(err)), errorBody(err, log)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// A failed write means the client is gone: the read loop sees it.
	if len(body) >= minPooledBody {
		// A read's bytes go out from where they are, not copied into
		// the frame first.
		bufs := net.Buffers{appendFrameHeader(make([]byte, 0, 9), seq, code, len(body)), body}
		_, _ = bufs.WriteTo(s.w)
		return
	}
	_, _ = s.w.Write(appendFrame(make([]byte, 0, 9+len(body)), seq, code, body))
}

// answer runs one of queue h's requests and replies to it; a large
// request's body, and a read's reply, go back to the pool.
func (s *server) answer(h uint32, sq *squeue, f frame) error {
	body, log, err := s.queueOp(h, sq, f)
	s.reply(f.seq, body, err, log)
	putBody(f.body)
	if Op(f.code) == OpRead && err == nil {
		putBody(body)
	}
	return err
}

// dispatch answers device-level requests at once and hands a queue's to
// its goroutine.
func (s *server) dispatch(f frame) {
	switch Op(f.code) {
	case OpInfo:
		b, err := json.Marshal(s.dev.Info())
		s.reply(f.seq, b, err, "")
		return
	case OpNewQueue:
		if err := s.newQueue(f); err != nil {
			s.reply(f.seq, nil, err, "")
		}
		return
	}
	d := newDec(f.body)
	qh := d.U32()
	s.mu.Lock()
	sq := s.queues[qh]
	s.mu.Unlock()
	if d.Err() != nil || sq == nil {
		s.reply(f.seq, nil, fmt.Errorf("%w: op %d on queue %d, which does not exist", ErrProtocol, f.code, qh), "")
		return
	}
	if Op(f.code) != OpBuild && Op(f.code) != OpBuildIL && Op(f.code) != OpCloseQueue && sq.busy.Load() == 0 {
		s.answer(qh, sq, f)
		return
	}
	sq.busy.Add(1)
	sq.reqs <- f
}

// newQueue creates a queue and, on success, replies with its handle
// itself (before the queue's goroutine can reply to anything).
func (s *server) newQueue(f frame) error {
	if len(f.body) != 0 {
		return fmt.Errorf("%w: new-queue with a body", ErrProtocol)
	}
	q, err := s.dev.NewQueue()
	if err != nil {
		return err
	}
	s.mu.Lock()
	h := s.handle()
	if h == 0 {
		s.mu.Unlock()
		q.Close()
		return fmt.Errorf("out of handles: %w", gpu.ErrOutOfMemory)
	}
	// The channel's room bounds the requests one queue may have waiting;
	// the client sends one at a time.
	sq := &squeue{q: q, reqs: make(chan frame, 16)}
	s.queues[h] = sq
	s.wg.Add(1)
	s.mu.Unlock()
	var e enc
	e.U32(h)
	s.reply(f.seq, e.B, nil, "")
	go s.runQueue(h, sq)
	return nil
}

// runQueue runs queue h's requests in order until it is closed.
func (s *server) runQueue(h uint32, sq *squeue) {
	defer s.wg.Done()
	for f := range sq.reqs {
		err := s.answer(h, sq, f)
		sq.busy.Add(-1)
		if Op(f.code) == OpCloseQueue && err == nil {
			return
		}
	}
}

// closeQueues closes every queue and waits for their goroutines.
func (s *server) closeQueues() {
	s.mu.Lock()
	qs := s.queues
	s.queues = map[uint32]*squeue{}
	s.mu.Unlock()
	for _, sq := range qs {
		close(sq.reqs)
	}
	s.wg.Wait()
	for _, sq := range qs {
		sq.q.Close()
	}
}

// obj returns queue h's object o of kind what.
func (s *server) obj(h, o uint32, what uint8) (sobj, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ob, ok := s.objs[o]
	if !ok || ob.what != what {
		return sobj{}, fmt.Errorf("handle %d: %w", o, gpu.ErrClosed)
	}
	if ob.q != h {
		return sobj{}, fmt.Errorf("handle %d: %w", o, gpu.ErrForeign)
	}
	return ob, nil
}

// add records a new object of queue h and returns its handle's body.
func (s *server) add(ob sobj) ([]byte, error) {
	s.mu.Lock()
	h := s.handle()
	if h != 0 {
		s.objs[h] = ob
	}
	s.mu.Unlock()
	if h == 0 {
		ob.release()
		return nil, fmt.Errorf("out of handles: %w", gpu.ErrOutOfMemory)
	}
	var e enc
	e.U32(h)
	return e.B, nil
}

// queueOp runs one of queue h's requests and returns the reply's body, a
// build log and the error.
func (s *server) queueOp(h uint32, sq *squeue, f frame) ([]byte, string, error) {
	r := &queueReq{s: s, h: h, q: sq.q, d: newDec(f.body)}
	r.d.U32() // the queue's handle, read by dispatch
	switch op := Op(f.code); op {
	case OpCloseQueue:
		return r.closeQueue()
	case OpAlloc:
		return r.alloc()
	case OpAllocAt:
		return r.allocAt()
	case OpWrite:
		return r.write()
	case OpRead:
		return r.read()
	case OpCopy:
		return r.copy()
	case OpFill:
		return r.fill()
	case OpBuild, OpBuildIL:
		return r.build(op)
	case OpKernel, OpKernelNames, OpProgramInfo:
		return r.programOp(op)
	case OpLaunch:
		return r.launch()
	case OpLaunchPrinting:
		return r.launchPrinting()
	case OpLaunches:
		return s.launches(h, r.q, &r.d, r.buf)
	case OpRelease:
		return r.release()
	}
	return nil, "", fmt.Errorf("%w: unknown op %d", ErrProtocol, f.code)
}

// queueReq is one request of queue h that queueOp is answering: its
// methods, one per op, decode the rest of the body from d and return the
// reply's body, a build log and the error.
type queueReq struct {
	s *server
	h uint32
	q gpu.Queue
	d dec // the request's body, past the queue's handle
}

// buf decodes a buffer's handle and returns that buffer of the queue.
func (r *queueReq) buf() (gpu.Buffer, error) {
	o := r.d.U32()
	if r.d.Err() != nil {
		return nil, r.d.Err()
	}
	ob, err := r.s.obj(r.h, o, relBuffer)
	return ob.buf, err
}

// closeQueue answers OpCloseQueue: it forgets the queue and its objects
// and closes it.
func (r *queueReq) closeQueue() ([]byte, string, error) {
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	s := r.s
	var onArena []sobj
	s.mu.Lock()
	delete(s.queues, r.h)
	for k, ob := range s.objs {
		if ob.q == r.h {
			delete(s.objs, k)
			if ob.on != nil {
				onArena = append(onArena, ob)
			}
		}
	}
	s.mu.Unlock()
	// The arena's buffers first, one by one, to learn whether the
	// runtime let go of their memory; Close releases the rest.
	letGo := true
	for _, ob := range onArena {
		letGo = ob.release() && letGo
	}
	return letGoBody(letGo), "", r.q.Close()
}

// alloc answers OpAlloc with the new buffer's handle.
func (r *queueReq) alloc() ([]byte, string, error) {
	size := r.d.U64()
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	b, err := r.q.Alloc(size)
	if err != nil {
		return nil, "", err
	}
	body, err := r.s.add(sobj{q: r.h, what: relBuffer, buf: b})
	return body, "", err
}

// allocAt answers OpAllocAt: a buffer on the arena's pages at off, which
// must lie wholly in the arena (the client places buffers; this only
// checks that what it names is arena memory).
func (r *queueReq) allocAt() ([]byte, string, error) {
	off, size := r.d.U64(), r.d.U64()
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	ha, ok := r.q.(gpu.HostAllocator)
	if r.s.arena == nil || !ok {
		return nil, "", fmt.Errorf("alloc on the arena: %w", gpu.ErrUnsupported)
	}
	n := uint64(len(r.s.arena))
	if size == 0 || off%ArenaPage != 0 || off > n || size > n-off {
		return nil, "", fmt.Errorf("alloc %d bytes at %d of a %d-byte arena: %w", size, off, n, gpu.ErrOutOfRange)
	}
	b, err := ha.AllocOn(r.s.arena[off : off+size])
	if err != nil {
		return nil, "", err
	}
	body, err := r.s.add(sobj{q: r.h, what: relBuffer, buf: b, on: ha})
	return body, "", err
}

// write answers OpWrite.
func (r *queueReq) write() ([]byte, string, error) {
	b, err := r.buf()
	off, data := r.d.U64(), r.d.Rest()
	// A body that does not decode answers first.
	if err := cmp.Or(r.d.done(), err); err != nil {
		return nil, "", err
	}
	return nil, "", r.q.Write(b, off, data)
}

// read answers OpRead with the bytes read.
func (r *queueReq) read() ([]byte, string, error) {
	b, err := r.buf()
	off, n := r.d.U64(), r.d.U32()
	// A body that does not decode answers first.
	if err := cmp.Or(r.d.done(), err); err != nil {
		return nil, "", err
	}
	if n > Chunk {
		return nil, "", fmt.Errorf("%w: read of %d bytes (at most %d a frame)", ErrProtocol, n, Chunk)
	}
	p := getBody(int(n)) // back to the pool once sent (answer)
	if err := r.q.Read(b, off, p); err != nil {
		putBody(p)
		return nil, "", err
	}
	return p, "", nil
}

// copy answers OpCopy.
func (r *queueReq) copy() ([]byte, string, error) {
	src, err1 := r.buf()
	dst, err2 := r.buf()
	so, do, n := r.d.U64(), r.d.U64(), r.d.U64()
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", err
	}
	return nil, "", r.q.Copy(src, dst, so, do, n)
}

// fill answers OpFill.
func (r *queueReq) fill() ([]byte, string, error) {
	b, err := r.buf()
	off, n := r.d.U64(), r.d.U64()
	pat := r.d.Take(int(r.d.U8()))
	// A body that does not decode answers first.
	if err := cmp.Or(r.d.done(), err); err != nil {
		return nil, "", err
	}
	return nil, "", r.q.Fill(b, off, n, pat)
}

// build answers OpBuild with the program's handle and the build log; a
// failed build's log goes with its error.
func (r *queueReq) build(op Op) ([]byte, string, error) {
	src, opts := r.d.s32(), r.d.s32()
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	var (
		p   gpu.Program
		log string
		err error
	)
	if op == OpBuildIL {
		ilb, ok := r.q.(gpu.ILBuilder)
		if !ok {
			return nil, "", fmt.Errorf("build: SPIR-V: %w", gpu.ErrUnsupported)
		}
		p, log, err = ilb.BuildIL([]byte(src), opts)
	} else {
		p, log, err = r.q.Build(src, opts)
	}
	if err != nil {
		return nil, log, err
	}
	body, err := r.s.add(sobj{q: r.h, what: relProgram, prog: p})
	if err != nil {
		return nil, log, err
	}
	var e enc
	e.Raw(body)
	e.s32(log)
	return e.B, "", nil
}

// programOp answers the requests about a program: OpKernel (a kernel's
// handle and its number of arguments), OpKernelNames and OpProgramInfo
// (its kernels' info as JSON).
func (r *queueReq) programOp(op Op) ([]byte, string, error) {
	ph := r.d.U32()
	var name string
	if op == OpKernel {
		name = r.d.s16()
	}
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	ob, err := r.s.obj(r.h, ph, relProgram)
	if err != nil {
		return nil, "", err
	}
	var e enc
	switch op {
	case OpKernel:
		k, err := ob.prog.Kernel(name)
		if err != nil {
			return nil, "", err
		}
		body, err := r.s.add(sobj{q: r.h, what: relKernel, kern: k})
		if err != nil {
			return nil, "", err
		}
		e.Raw(body)
		e.U32(uint32(k.NumArgs()))
		return e.B, "", nil
	case OpKernelNames:
		names := ob.prog.KernelNames()
		e.U32(uint32(len(names)))
		for _, n := range names {
			e.s16(n)
		}
		return e.B, "", nil
	default:
		info, err := ob.prog.Info()
		if err != nil {
			return nil, "", err
		}
		b, err := json.Marshal(info)
		return b, "", err
	}
}

// launch answers OpLaunch with the launch's device time.
func (r *queueReq) launch() ([]byte, string, error) {
	kh, nd, args, argErr := decodeLaunch(&r.d, r.buf)
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	if argErr != nil {
		return nil, "", argErr
	}
	ob, err := r.s.obj(r.h, kh, relKernel)
	if err != nil {
		return nil, "", err
	}
	t, err := r.q.Launch(ob.kern, nd, args)
	if err != nil {
		return nil, "", err
	}
	var e enc
	e.U64(uint64(t))
	return e.B, "", nil
}

// launchPrinting answers OpLaunchPrinting: the launch's device time and
// what the kernel printed while it ran.
func (r *queueReq) launchPrinting() ([]byte, string, error) {
	n := int(r.d.U32())
	kh, nd, args, argErr := decodeLaunch(&r.d, r.buf)
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	if argErr != nil {
		return nil, "", argErr
	}
	if r.s.out == nil {
		return nil, "", fmt.Errorf("printf output: %w", gpu.ErrUnsupported)
	}
	ob, err := r.s.obj(r.h, kh, relKernel)
	if err != nil {
		return nil, "", err
	}
	if err := r.s.out.Discard(); err != nil {
		return nil, "", fmt.Errorf("printf output: %w", errors.Join(gpu.ErrUnsupported, err))
	}
	t, err := r.q.Launch(ob.kern, nd, args)
	if err != nil {
		return nil, "", err
	}
	data, dropped, err := r.s.out.Take(min(n, MaxPrintout))
	if err != nil {
		// The kernel ran: its output is lost, not its result.
		data, dropped = nil, 0
	}
	var e enc
	e.U64(uint64(t))
	e.U64(dropped)
	e.B = append(e.B, data...)
	return e.B, "", nil
}

// release answers OpRelease: it forgets the object and releases it.
func (r *queueReq) release() ([]byte, string, error) {
	what, o := r.d.U8(), r.d.U32()
	if err := r.d.done(); err != nil {
		return nil, "", err
	}
	ob, err := r.s.obj(r.h, o, what)
	if err != nil {
		return nil, "", err
	}
	s := r.s
	s.mu.Lock()
	delete(s.objs, o)
	s.mu.Unlock()
	return letGoBody(ob.release()), "", nil
}

// decodeLaunch decodes a launch's kernel handle, NDRange and arguments
// (OpLaunch's body after the queue handle, one entry of OpLaunches).
// argErr is an argument naming no buffer of the queue: the body still
// decodes, and the launch fails with it.
func decodeLaunch(d *dec, buf func() (gpu.Buffer, error)) (kh uint32, r gpu.NDRange, args []gpu.Arg, argErr error) {
	kh = d.U32()
	r = d.ndrange()
	n := int(d.U16())
	if n > maxArgs {
		d.Fail("%d launch arguments", n)
	}
	for i := 0; i < n && d.Err() == nil; i++ {
		switch d.U8() {
		case argBuffer:
			b, err := buf()
			argErr = errors.Join(argErr, err)
			args = append(args, gpu.Arg{Buffer: b})
		case argScalar:
			v := d.Take(int(d.U16()))
			// An empty scalar is still a scalar to the device.
			args = append(args, gpu.Arg{Scalar: append([]byte{}, v...)})
		case argLocal:
			args = append(args, gpu.Arg{Local: d.U64()})
		case argImage:
			b, err := buf()
			argErr = errors.Join(argErr, err)
			im := &gpu.Image{Type: d.U32(), Order: d.U32(), DataType: d.U32()}
			im.Width, im.Height, im.Depth, im.ArraySize = d.U64(), d.U64(), d.U64(), d.U64()
			args = append(args, gpu.Arg{Buffer: b, Image: im})
		case argSampler:
			norm := d.U8()
			if norm > 1 {
				d.Fail("argument %d: sampler normalized %d", i, norm)
			}
			args = append(args, gpu.Arg{Sampler: &gpu.Sampler{Normalized: norm == 1, Addressing: d.U32(), Filter: d.U32()}})
		default:
			d.Fail("argument %d of an unknown kind", i)
		}
	}
	return kh, r, args, argErr
}

// launches runs an OpLaunches batch: every launch decoded first (a body
// that does not decode fails the whole batch), then enqueued behind each
// other where the queue is a gpu.Pipeliner and waited for once, else run
// one by one. The reply has each launch's outcome in order.
func (s *server) launches(h uint32, q gpu.Queue, d *dec, buf func() (gpu.Buffer, error)) ([]byte, string, error) {
	n := int(d.U16())
	if n > MaxBatch {
		d.Fail("%d launches in a batch", n)
	}
	type launch struct {
		k    gpu.Kernel
		r    gpu.NDRange
		args []gpu.Arg
		err  error
	}
	ls := make([]launch, 0, min(n, MaxBatch))
	for i := 0; i < n && d.Err() == nil; i++ {
		kh, r, args, err := decodeLaunch(d, buf)
		l := launch{r: r, args: args, err: err}
		if d.Err() == nil && err == nil {
			ob, err := s.obj(h, kh, relKernel)
			l.k, l.err = ob.kern, err
		}
		ls = append(ls, l)
	}
	if err := d.done(); err != nil {
		return nil, "", err
	}
	res := make([]gpu.LaunchResult, len(ls))
	pl, pipelined := q.(gpu.Pipeliner)
	var enq []int // indices of the launches enqueued
	for i, l := range ls {
		switch {
		case l.err != nil:
			res[i].Err = l.err
		case pipelined:
			if err := pl.Enqueue(l.k, l.r, l.args); err != nil {
				res[i].Err = err
			} else {
				enq = append(enq, i)
			}
		default:
			res[i].Device, res[i].Err = q.Launch(l.k, l.r, l.args)
		}
	}
	if pipelined && len(enq) > 0 {
		for j, r := range pl.Sync() {
			if j < len(enq) {
				res[enq[j]] = r
			}
		}
	}
	var e enc
	appendResults(&e, res)
	return e.B, "", nil
}
