//go:build cgo

package gpu

/*
#include "opencl_cgo.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

// queue is a Queue. Its mutex serialises every OpenCL call on the queue and
// on the buffers, programs and kernels it created, so Close and Release are
// safe against work in progress; callers still use a queue from one
// goroutine at a time.
type queue struct {
	dev *device

	mu       sync.Mutex
	q        C.cl_command_queue // nil once closed
	buffers  map[*buffer]struct{}
	programs map[*program]struct{}
	enqueued []enqueued // launches not yet synced (Pipeliner)
	syncing  int        // Syncs waiting for launches taken from enqueued
	stage    []stage    // staging memory of streams (opencl_stream.go), made on the first
	stageErr error      // why stage could not be made, once tried
}

var _ Pipeliner = (*queue)(nil)

// enqueued is a launch Enqueue started: its kernel's name and events.
type enqueued struct {
	name string
	ev   C.cl_event
	tail C.cl_event // the last image copy back, or nil (opencl_image.go)
}

// closedErr is the error of op on a closed queue.
func (q *queue) closedErr(op string) error {
	return fmt.Errorf("%s: queue: %w", op, ErrClosed)
}

// Close releases every buffer, program and kernel of the queue and the
// queue itself, after work in progress. It is idempotent.
func (q *queue) Close() error {
	q.mu.Lock()
	var first error
	if q.q != nil {
		// Launches never synced: wait for them (their buffers are about
		// to go) and drop their outcomes.
		for _, e := range q.enqueued {
			C.clWaitForEvents(1, &e.ev)
			C.clReleaseEvent(e.ev)
			waitTail(e.tail)
		}
		q.enqueued = nil
		q.freeStagesLocked()
		for b := range q.buffers {
			b.releaseLocked()
		}
		for p := range q.programs {
			p.releaseLocked()
		}
		first = clErr("clReleaseCommandQueue", C.clReleaseCommandQueue(q.q))
		q.q = nil
	}
	q.mu.Unlock()
	q.dev.mu.Lock()
	delete(q.dev.queues, q)
	q.dev.mu.Unlock()
	return first
}
