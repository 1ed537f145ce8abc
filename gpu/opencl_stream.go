//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

// vg_stage_make makes one piece of staging memory: a buffer on memory the
// runtime allocates for the host (CL_MEM_ALLOC_HOST_PTR: pinned memory on
// NVIDIA's and AMD's platforms, which their copy engines reach without a
// bounce of their own), mapped once for as long as the queue lives.
static cl_int vg_stage_make(cl_context c, cl_command_queue q, size_t size, cl_mem *mem, void **host) {
	cl_int err = CL_SUCCESS;
	*mem = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, size, NULL, &err);
	if (err != CL_SUCCESS) return err;
	*host = clEnqueueMapBuffer(q, *mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, size, 0, NULL, NULL, &err);
	if (err != CL_SUCCESS) {
		clReleaseMemObject(*mem);
		*mem = NULL;
	}
	return err;
}

// vg_stage_free unmaps and releases a piece of staging memory.
static void vg_stage_free(cl_command_queue q, cl_mem mem, void *host) {
	if (clEnqueueUnmapMemObject(q, mem, host, 0, NULL, NULL) == CL_SUCCESS) clFinish(q);
	clReleaseMemObject(mem);
}

// vg_stream_start enqueues a write (write != 0) or read of n bytes of m at
// off from or into host without waiting, and hands it to the device.
static cl_int vg_stream_start(cl_command_queue q, cl_mem m, int write, size_t off, size_t n, void *host, cl_event *ev) {
	cl_int err;
	if (write) err = clEnqueueWriteBuffer(q, m, CL_FALSE, off, n, host, 0, NULL, ev);
	else err = clEnqueueReadBuffer(q, m, CL_FALSE, off, n, host, 0, NULL, ev);
	if (err != CL_SUCCESS) return err;
	clFlush(q);
	return CL_SUCCESS;
}

// vg_stream_wait waits for a transfer vg_stream_start began and releases
// its event; a negative status is the transfer's failure.
static cl_int vg_stream_wait(cl_event ev) {
	cl_int err = clWaitForEvents(1, &ev);
	cl_int st = CL_COMPLETE;
	clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
	clReleaseEvent(ev);
	if (err != CL_SUCCESS) return err;
	return st < 0 ? st : CL_SUCCESS;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

var _ Streamer = (*queue)(nil)

// The geometry of the staging memory a queue makes: StreamPiece and
// StreamPieces, which BenchmarkStream varies.
var streamPiece, streamPieces = StreamPiece, StreamPieces

// stage is one piece of a queue's staging memory.
type stage struct {
	mem  C.cl_mem
	host []byte // the mapping, streamPiece bytes of C memory
	ev   C.cl_event
	busy bool // a transfer from or into host is under way (ev)
}

// stages returns the queue's staging memory, made on first use. q.mu must
// be held. It reports ErrUnsupported for a host-backed device (whose
// copies are memory copies already) and where the memory cannot be made
// (then never tried again on this queue).
func (q *queue) stages() ([]stage, error) {
	switch {
	case q.dev.hostBacked:
		return nil, fmt.Errorf("stream: host-backed buffers move in place: %w", ErrUnsupported)
	case q.stageErr != nil:
		return nil, q.stageErr
	case q.stage != nil:
		return q.stage, nil
	}
	st := make([]stage, streamPieces)
	for i := range st {
		var host unsafe.Pointer
		if err := clErr("clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", C.vg_stage_make(q.dev.ctx, q.q, C.size_t(streamPiece), &st[i].mem, &host)); err != nil {
			for _, s := range st[:i] {
				C.vg_stage_free(q.q, s.mem, unsafe.Pointer(&s.host[0]))
			}
			q.stageErr = fmt.Errorf("stream: staging memory: %w: %w", err, ErrUnsupported)
			return nil, q.stageErr
		}
		st[i].host = unsafe.Slice((*byte)(host), streamPiece)
	}
	q.stage = st
	return st, nil
}

// freeStagesLocked waits for and releases the queue's staging memory.
// q.mu must be held and q.q live.
func (q *queue) freeStagesLocked() {
	for i := range q.stage {
		s := &q.stage[i]
		if s.busy {
			C.vg_stream_wait(s.ev)
		}
		C.vg_stage_free(q.q, s.mem, unsafe.Pointer(&s.host[0]))
	}
	q.stage = nil
}

// Streams reports whether the queue streams: not on a host-backed device,
// nor once its staging memory could not be made.
func (q *queue) Streams() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.dev.hostBacked && q.stageErr == nil
}

// StreamWrite moves n bytes into b at off through the queue's staging
// memory: fill writes the next len(p) bytes of the source into p, piece
// by piece in order, while the pieces filled before it transfer.
func (q *queue) StreamWrite(b Buffer, off, n uint64, fill func(p []byte) error) error {
	return q.stream("write", b, off, n, fill)
}

// StreamRead moves n bytes of b at off out through the queue's staging
// memory: drain takes the next len(p) bytes from p, piece by piece in
// order, while the pieces after it transfer.
func (q *queue) StreamRead(b Buffer, off, n uint64, drain func(p []byte) error) error {
	return q.stream("read", b, off, n, drain)
}

// stream is StreamWrite (op "write") or StreamRead. Every transfer it
// starts has ended when it returns, whatever happened: the staging memory
// is the queue's again.
func (q *queue) stream(op string, b Buffer, off, n uint64, f func(p []byte) error) (err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return q.closedErr(op)
	}
	bb, err := q.checkBuffer(op, b)
	if err != nil {
		return err
	}
	if off > bb.size || n > bb.size-off {
		return fmt.Errorf("stream %s %d bytes at %d of a %d-byte buffer: %w", op, n, off, bb.size, ErrOutOfRange)
	}
	st, err := q.stages()
	if err != nil {
		return err
	}
	s := streaming{q: q, mem: bb.mem, write: op == "write", st: st}
	defer func() {
		if werr := s.waitAll(); err == nil {
			err = werr
		}
		if err != nil {
			err = fmt.Errorf("stream %s %d bytes at %d: %w", op, n, off, err)
		}
	}()
	if s.write {
		return s.writeAll(off, n, f)
	}
	return s.readAll(off, n, f)
}

// streaming is one stream's state: its pieces are used round robin.
type streaming struct {
	q     *queue
	mem   C.cl_mem
	write bool
	st    []stage
	// pending are the device offsets and lengths of the reads under way,
	// oldest first, with the piece each lands in.
	pending []piece
}

type piece struct {
	stage    int
	off, len uint64
}

// start begins the transfer of piece p.
func (s *streaming) start(p piece) error {
	st := &s.st[p.stage]
	w := C.int(0)
	call := "clEnqueueReadBuffer"
	if s.write {
		w, call = 1, "clEnqueueWriteBuffer"
	}
	if err := clErr(call, C.vg_stream_start(s.q.q, s.mem, w, C.size_t(p.off), C.size_t(p.len), unsafe.Pointer(&st.host[0]), &st.ev)); err != nil {
		return err
	}
	st.busy = true
	return nil
}

// wait waits for the transfer of stage i, if any.
func (s *streaming) wait(i int) error {
	st := &s.st[i]
	if !st.busy {
		return nil
	}
	st.busy = false
	return clErr("clWaitForEvents", C.vg_stream_wait(st.ev))
}

// waitAll waits for every transfer under way and returns the first
// failure.
func (s *streaming) waitAll() error {
	var first error
	for i := range s.st {
		if err := s.wait(i); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// writeAll fills the pieces round robin, each starting its transfer once
// filled; a piece is filled again once its last transfer ended.
func (s *streaming) writeAll(off, n uint64, fill func(p []byte) error) error {
	for i := 0; n > 0; i = (i + 1) % len(s.st) {
		if err := s.wait(i); err != nil {
			return err
		}
		k := min(n, uint64(len(s.st[i].host)))
		if err := fill(s.st[i].host[:k]); err != nil {
			return err
		}
		if err := s.start(piece{stage: i, off: off, len: k}); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// readAll keeps every piece's read under way, draining the oldest as it
// lands and starting the next read in its piece.
func (s *streaming) readAll(off, n uint64, drain func(p []byte) error) error {
	next := func(i int) error {
		if n == 0 {
			return nil
		}
		p := piece{stage: i, off: off, len: min(n, uint64(len(s.st[i].host)))}
		if err := s.start(p); err != nil {
			return err
		}
		s.pending = append(s.pending, p)
		off, n = off+p.len, n-p.len
		return nil
	}
	for i := range s.st {
		if err := next(i); err != nil {
			return err
		}
	}
	for len(s.pending) > 0 {
		p := s.pending[0]
		s.pending = s.pending[1:]
		if err := s.wait(p.stage); err != nil {
			return err
		}
		if err := drain(s.st[p.stage].host[:p.len]); err != nil {
			return err
		}
		if err := next(p.stage); err != nil {
			return err
		}
	}
	return nil
}
