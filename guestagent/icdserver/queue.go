package icdserver

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/icdproto"
	"github.com/vgpud/vgpud/internal/pollbudget"
	"github.com/vgpud/vgpud/internal/scmrights"
)

// The submission queue (protocol version 2, issue 43; docs/icd-protocol.md
// "Submission queue"): a connection that attached one sends its requests
// by writing them into memory shared with the daemon, not one datagram
// each. The connection's goroutine executes the queue's messages in
// order; when the queue is empty it looks again, at once, for a bounded
// window (a client's next call usually follows within microseconds), then
// stores the queue's sleep word and blocks on the socket, where the
// client's OpKick finds it. While the daemon looks, a client writes and
// returns without a system call.
//
// The socket is read only while the queue is empty, so a request sent
// over it (OpDrain, OpAttach) runs after every queue entry written before
// it was sent; the client writes nothing more until its reply, and says
// in the queue's sock word that it waits, so that the looking stops.
//
// The window is spent only where it pays, as a Wait's looking is
// (waitpoll.go): not after a reply (the client was blocked and wakes
// first), and a connection whose last queuePollMisses windows all ran
// out sleeps at once, and looks again on every queuePollProbe-th sleep.

const (
	// DefaultQueuePoll bounds how long an empty queue is looked at
	// before the daemon sleeps: a client's turn-around between calls
	// (its result check, the next call's arguments).
	DefaultQueuePoll = 50 * time.Microsecond
	queuePollMisses  = pollbudget.Misses
	queuePollProbe   = pollbudget.Probe
)

// QueueStats counts how the Server's connections sent their requests:
// requests read from submission queues (Queued) or as datagrams
// (Socket, kicks included), kicks received (Kicks), times a daemon found
// an empty queue and slept on the socket (Sleeps), and times its looking
// found the client's next request (Polled).
type QueueStats struct {
	Queued, Socket, Kicks, Sleeps, Polled uint64
}

type queueCounters struct {
	queued, socket, kicks, sleeps, polled atomic.Uint64
}

// QueueStats returns how the Server's requests have arrived.
func (s *Server) QueueStats() QueueStats {
	q := &s.queues
	return QueueStats{Queued: q.queued.Load(), Socket: q.socket.Load(), Kicks: q.kicks.Load(),
		Sleeps: q.sleeps.Load(), Polled: q.polled.Load()}
}

// doQueue attaches the connection's submission queue.
func (c *conn) doQueue(v *icdproto.Queue, fds []int) (any, error) {
	defer scmrights.Close(fds)
	if c.version < 2 {
		return nil, icdproto.Errorf(icdproto.ErrUnknownOp, "queue in protocol version %d", c.version)
	}
	if c.queue != nil {
		return nil, icdproto.Errorf(icdproto.ErrDuplicate, "a second queue")
	}
	refuse := func(code icdproto.ErrCode, why any) (any, error) {
		c.log.Info("icd queue refused", "size", v.Size, "fds", len(fds), "why", why)
		return &icdproto.QueueReply{Status: uint32(code)}, nil
	}
	if len(fds) != 1 {
		return refuse(icdproto.ErrArena, "no file descriptor")
	}
	if err := icdproto.CheckQueueSize(v.Size); err != nil {
		return refuse(icdproto.CodeOf(err), err)
	}
	m, err := mapArena(fds[0], v.Size)
	if err != nil {
		return refuse(icdproto.CodeOf(err), err)
	}
	q, err := icdproto.NewQueueReader(m)
	if err != nil {
		unmapArena(m) //nolint:errcheck // refused anyway
		return refuse(icdproto.CodeOf(err), err)
	}
	c.queue, c.queueMap = q, m
	return &icdproto.QueueReply{}, nil
}

// runQueue executes the queue's messages until it has been empty for the
// poll window and the sleep word is stored; false when the connection
// must end (a protocol error, answered).
func (c *conn) runQueue(buf []byte) bool {
	replied := false // the last request run was answered
	for {
		msg, err := c.queue.Next(buf)
		if err != nil {
			c.fail(0, err)
			return false
		}
		if msg != nil {
			c.s.queues.queued.Add(1)
			h, body, err := icdproto.Unmarshal(msg)
			if err == nil && !queued(h.Op) {
				err = icdproto.Errorf(icdproto.ErrMalformed, "%v in the submission queue", h.Op)
			}
			if err != nil {
				c.fail(h.ID, err)
				return false
			}
			if !c.exec(h, body, nil) {
				return false
			}
			replied = h.Op.Replied()
			continue
		}
		// After a reply the client was blocked: it needs a wake-up
		// before it writes again, and looking meanwhile takes the CPU
		// it (and the device's processes) wake on.
		if !replied && c.pollQueue() {
			continue
		}
		if c.queue.Sleep() {
			c.s.queues.sleeps.Add(1)
			return true
		}
	}
}

// queued reports whether a request of op may come through the queue:
// every request but those that set the connection up, carry file
// descriptors or concern the socket.
func queued(op icdproto.Op) bool {
	switch op {
	case icdproto.OpHello, icdproto.OpAttach, icdproto.OpQueue, icdproto.OpKick, icdproto.OpDrain:
		return false
	}
	return true
}

// pollQueue looks at the empty queue, again at once, until the client
// writes (true) or the window passes (false), unless the connection's
// recent windows ran out.
func (c *conn) pollQueue() bool {
	window := c.s.cfg.QueuePoll
	if window < 0 {
		return false
	}
	if window == 0 {
		window = DefaultQueuePoll
	}
	p := &c.qpoll
	if !p.Look() {
		return false
	}
	deadline := time.Now().Add(window)
	for {
		// A plain loop of loads: runtime.Gosched here would wake the
		// runtime's idle threads on every turn, CPU the device's
		// processes need on a small host.
		for range 256 {
			if c.queue.SocketWanted() {
				return false
			}
			if c.queue.Pending() {
				p.Paid()
				c.s.queues.polled.Add(1)
				return true
			}
		}
		if !time.Now().Before(deadline) {
			p.RanOut()
			return false
		}
		select {
		case <-c.quit:
			return false
		default:
		}
		// Let a thread waiting for this CPU (the client, the
		// device's processes) run first.
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) //nolint:errcheck // it cannot fail
	}
}
