package icdproto

import (
	"sync/atomic"
	"unsafe"
)

// The submission queue (version 2; docs/icd-protocol.md "Submission
// queue"): a memfd the client maps shared with the daemon and attaches
// with OpQueue, into which it writes its requests instead of sending
// each one as a datagram. The first QueueHeaderSize bytes hold three
// words, each on a cache line of its own; the rest is the data area, a
// power of two in size, holding messages exactly as they would be sent
// (Header and body), each starting on a QueueAlign boundary:
//
//	tail  u64 at QueueTailOffset: bytes the client has written, in all
//	head  u64 at QueueHeadOffset: bytes the daemon has consumed, in all
//	sleep u32 at QueueSleepOffset: 1 when the daemon may sleep
//	sock  u32 at QueueSocketOffset: 1 when the client sent a request
//	      over the socket (OpDrain, OpAttach) and waits for its reply
//
// A message occupies its length rounded up to QueueAlign; one that would
// cross the end of the data area is written at its start, after a header
// of op OpPad whose len is the bytes from the pad to the end. The client
// publishes a message by storing the new tail; the daemon copies the
// message out before it decodes it and then stores the new head, after
// which the client may reuse the space.
//
// Notification (the virtio event index's idea, as a flag): a daemon that
// found the queue empty for its poll window stores sleep = 1, looks at
// the tail once more, and blocks on the socket; a client that stored a
// tail and then finds sleep = 1 exchanges it for 0 and, if it was the one
// to clear it, sends OpKick over the socket. Both sides use sequentially
// consistent stores and loads, so one of them always sees the other.
//
// The daemon trusts nothing it reads here: it keeps its head privately
// (never reading the shared copy back), reads the tail once per look and
// checks it against its head and the data area's size, reads each
// message's header once, copies the message out and decodes the copy.
// Any inconsistency is a protocol error of the connection.
const (
	QueueHeaderSize   = 4096
	QueueTailOffset   = 0
	QueueHeadOffset   = 64
	QueueSleepOffset  = 128
	QueueSocketOffset = 192
	QueueAlign        = 16
	// MinQueueData is the smallest data area: a message of MaxMessage
	// always fits once the queue is empty, pad included.
	MinQueueData = 2 * MaxMessage
	// MaxQueueData is the largest data area.
	MaxQueueData = 16 << 20
	// DefaultQueueData is the data area the ICD makes: 256 KiB, about
	// 1,400 launches of a few arguments.
	DefaultQueueData = 256 << 10
)

// CheckQueueSize checks a queue's total size (header and data area).
func CheckQueueSize(size uint64) error {
	if size < QueueHeaderSize+MinQueueData || size > QueueHeaderSize+MaxQueueData {
		return Errorf(ErrRange, "queue of %d bytes: want %d + a power of two from %d to %d", size, QueueHeaderSize, MinQueueData, MaxQueueData)
	}
	if d := size - QueueHeaderSize; d&(d-1) != 0 {
		return Errorf(ErrMalformed, "queue data area of %d bytes is not a power of two", d)
	}
	return nil
}

// queueWords are the header's words of a queue mapping.
type queueWords struct {
	tail, head  *uint64
	sleep, sock *uint32
}

func words(m []byte) (queueWords, []byte, error) {
	if err := CheckQueueSize(uint64(len(m))); err != nil {
		return queueWords{}, nil, err
	}
	if uintptr(unsafe.Pointer(&m[0]))%8 != 0 {
		return queueWords{}, nil, Errorf(ErrInternal, "queue mapping not 8-byte aligned")
	}
	return queueWords{
		tail:  (*uint64)(unsafe.Pointer(&m[QueueTailOffset])),
		head:  (*uint64)(unsafe.Pointer(&m[QueueHeadOffset])),
		sleep: (*uint32)(unsafe.Pointer(&m[QueueSleepOffset])),
		sock:  (*uint32)(unsafe.Pointer(&m[QueueSocketOffset])),
	}, m[QueueHeaderSize:], nil
}

func alignQueue(n uint64) uint64 { return (n + QueueAlign - 1) &^ (QueueAlign - 1) }

// QueueReader is the daemon's side of a submission queue. It is not safe
// for concurrent use.
type QueueReader struct {
	w    queueWords
	data []byte
	head uint64 // the daemon's own: never read back from the mapping
	tail uint64 // the last tail read and checked
}

// NewQueueReader reads the queue mapped at m (QueueHeaderSize + the data
// area; 8-byte aligned, as a mapping is). The client's tail is read when
// the reader first looks; the head starts at 0 and is stored.
func NewQueueReader(m []byte) (*QueueReader, error) {
	w, data, err := words(m)
	if err != nil {
		return nil, err
	}
	atomic.StoreUint64(w.head, 0)
	atomic.StoreUint32(w.sleep, 0)
	atomic.StoreUint32(w.sock, 0)
	return &QueueReader{w: w, data: data}, nil
}

// Next copies the next message into buf (at least MaxMessage bytes) and
// returns it, header first; nil when the queue is empty. The header of
// the returned copy is the one Next checked (the client cannot change it
// in between). An error is the client's protocol error: the queue's
// state is then undefined and the connection must end.
func (q *QueueReader) Next(buf []byte) ([]byte, error) {
	size := uint64(len(q.data))
	for {
		if q.head == q.tail {
			t := atomic.LoadUint64(q.w.tail)
			if t-q.head > size {
				return nil, Errorf(ErrRange, "queue tail %d with head %d: more than the %d-byte data area", t, q.head, size)
			}
			q.tail = t
			if t == q.head {
				return nil, nil
			}
		}
		off := q.head & (size - 1)
		avail := q.tail - q.head
		toEnd := size - off
		if avail < HeaderSize || avail%QueueAlign != 0 {
			return nil, Errorf(ErrMalformed, "queue entry of %d bytes at %d", avail, q.head)
		}
		var h [HeaderSize]byte
		copy(h[:], q.data[off:off+HeaderSize])
		n := uint64(le.Uint32(h[4:]))
		if Op(le.Uint16(h[0:])) == OpPad {
			if n != toEnd || avail < toEnd {
				return nil, Errorf(ErrMalformed, "queue pad of %d bytes at %d: %d to the end, %d written", n, q.head, toEnd, avail)
			}
			q.advance(toEnd)
			continue
		}
		if n < HeaderSize || n > MaxMessage || alignQueue(n) > toEnd || alignQueue(n) > avail {
			return nil, Errorf(ErrMalformed, "queue message of %d bytes at %d: %d written, %d to the end", n, q.head, avail, toEnd)
		}
		msg := buf[:n]
		copy(msg, q.data[off:off+n])
		copy(msg, h[:])
		q.advance(alignQueue(n))
		return msg, nil
	}
}

func (q *QueueReader) advance(n uint64) {
	q.head += n
	atomic.StoreUint64(q.w.head, q.head)
}

// Pending reports whether the client has written past what the reader
// consumed (without checking the tail: Next does).
func (q *QueueReader) Pending() bool { return atomic.LoadUint64(q.w.tail) != q.head }

// Sleep stores the sleep word and reports whether the queue is still
// empty, so that the daemon may block on the socket: a client that
// writes after this sees the word and kicks. When the queue is not empty
// it clears the word again and reports false.
func (q *QueueReader) Sleep() bool {
	atomic.StoreUint32(q.w.sleep, 1)
	if q.Pending() {
		atomic.StoreUint32(q.w.sleep, 0)
		return false
	}
	return true
}

// SocketWanted reports whether the client waits for the reply of a
// request it sent over the socket (it may lie: then the daemon only
// looks at the empty queue less).
func (q *QueueReader) SocketWanted() bool { return atomic.LoadUint32(q.w.sock) != 0 }

// Awake clears the sleep word: the daemon has read the socket and looks
// at the queue again.
func (q *QueueReader) Awake() { atomic.StoreUint32(q.w.sleep, 0) }

// SocketServed clears the sock word: the daemon has read the request the
// client set it for (not a Kick, which may have been sent before it).
func (q *QueueReader) SocketServed() { atomic.StoreUint32(q.w.sock, 0) }

// QueueWriter is a client's side of a submission queue (the C ICD has its
// own; this one serves Go clients and tests). It is not safe for
// concurrent use.
type QueueWriter struct {
	w    queueWords
	data []byte
	tail uint64
}

// NewQueueWriter writes the queue mapped at m, which must be zero (a new
// memfd).
func NewQueueWriter(m []byte) (*QueueWriter, error) {
	w, data, err := words(m)
	if err != nil {
		return nil, err
	}
	return &QueueWriter{w: w, data: data}, nil
}

// Put writes one encoded message and publishes it. It reports false,
// writing nothing, when the queue has no room for it (the client then
// sends OpDrain and waits for its reply).
func (q *QueueWriter) Put(msg []byte) bool {
	size := uint64(len(q.data))
	n := uint64(len(msg))
	if n < HeaderSize || n > MaxMessage {
		return false
	}
	span := alignQueue(n)
	off := q.tail & (size - 1)
	toEnd := size - off
	need := span
	if span > toEnd {
		need += toEnd
	}
	if need > size-(q.tail-atomic.LoadUint64(q.w.head)) {
		return false
	}
	if span > toEnd {
		var pad [HeaderSize]byte
		le.PutUint16(pad[0:], uint16(OpPad))
		le.PutUint32(pad[4:], uint32(toEnd))
		copy(q.data[off:], pad[:])
		q.tail += toEnd
		off = 0
	}
	copy(q.data[off:], msg)
	q.tail += span
	atomic.StoreUint64(q.w.tail, q.tail)
	return true
}

// NeedKick reports whether the writer must send OpKick: the daemon said
// it sleeps, and this call cleared the word (so one kick answers one
// sleep).
func (q *QueueWriter) NeedKick() bool {
	return atomic.LoadUint32(q.w.sleep) != 0 && atomic.SwapUint32(q.w.sleep, 0) == 1
}

// WantSocket says the client is about to send a request over the socket
// and wait for its reply.
func (q *QueueWriter) WantSocket() { atomic.StoreUint32(q.w.sock, 1) }

// Empty reports whether the daemon has consumed everything written.
func (q *QueueWriter) Empty() bool { return atomic.LoadUint64(q.w.head) == q.tail }
