package icdproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// newQueue returns a zeroed queue mapping of data bytes of data area,
// 8-byte aligned as a mapping is.
func newQueue(data int) []byte {
	words := make([]uint64, (QueueHeaderSize+data)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

// message is a well-formed datagram of n bytes (n >= HeaderSize) whose
// body bytes say which it is.
func message(n int, tag byte) []byte {
	m := make([]byte, n)
	binary.LittleEndian.PutUint16(m[0:], uint16(OpFlush))
	binary.LittleEndian.PutUint32(m[4:], uint32(n))
	binary.LittleEndian.PutUint64(m[8:], uint64(tag))
	for i := HeaderSize; i < n; i++ {
		m[i] = tag
	}
	return m
}

// TestQueueModel writes and reads random messages through a queue and
// checks that the reader sees exactly what was written, in order, across
// wraps and pads, and that Put refuses only when the queue lacks room.
func TestQueueModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newQueue(MinQueueData)
		w, err := NewQueueWriter(m)
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewQueueReader(m)
		if err != nil {
			t.Fatal(err)
		}
		var fifo [][]byte
		buf := make([]byte, MaxMessage)
		tag := byte(0)
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "put") {
				n := rapid.IntRange(HeaderSize, MaxMessage).Draw(t, "len")
				tag++
				msg := message(n, tag)
				if w.Put(msg) {
					fifo = append(fifo, msg)
				} else if w.Empty() {
					t.Fatalf("Put of %d bytes refused by an empty queue", n)
				}
				continue
			}
			got, err := r.Next(buf)
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if len(fifo) == 0 {
				if got != nil {
					t.Fatalf("Next of an empty queue = %d bytes", len(got))
				}
				continue
			}
			if !bytes.Equal(got, fifo[0]) {
				t.Fatalf("Next = %d bytes (tag %d), want %d (tag %d)", len(got), got[8], len(fifo[0]), fifo[0][8])
			}
			fifo = fifo[1:]
		}
	})
}

// TestQueueRefusesBadState: whatever a client writes, the reader answers
// with a protocol error, never a panic or a message it did not check.
func TestQueueRefusesBadState(t *testing.T) {
	const size = MinQueueData
	le16 := binary.LittleEndian.PutUint16
	le32 := binary.LittleEndian.PutUint32
	le64 := binary.LittleEndian.PutUint64
	for _, tc := range []struct {
		name string
		set  func(m []byte)
		want ErrCode
	}{
		{"tail past the data area", func(m []byte) { le64(m[QueueTailOffset:], size+QueueAlign) }, ErrRange},
		{"tail behind the head", func(m []byte) { le64(m[QueueTailOffset:], ^uint64(0)-15) }, ErrRange},
		{"tail not aligned", func(m []byte) { le64(m[QueueTailOffset:], 24) }, ErrMalformed},
		{"length past the tail", func(m []byte) {
			le32(m[QueueHeaderSize+4:], 64)
			le64(m[QueueTailOffset:], 32)
		}, ErrMalformed},
		{"length under a header", func(m []byte) {
			le32(m[QueueHeaderSize+4:], 8)
			le64(m[QueueTailOffset:], 16)
		}, ErrMalformed},
		{"length over MaxMessage", func(m []byte) {
			le32(m[QueueHeaderSize+4:], MaxMessage+16)
			le64(m[QueueTailOffset:], size)
		}, ErrMalformed},
		{"pad short of the end", func(m []byte) {
			le16(m[QueueHeaderSize:], uint16(OpPad))
			le32(m[QueueHeaderSize+4:], 32)
			le64(m[QueueTailOffset:], 32)
		}, ErrMalformed},
		{"pad past the tail", func(m []byte) {
			le16(m[QueueHeaderSize:], uint16(OpPad))
			le32(m[QueueHeaderSize+4:], size)
			le64(m[QueueTailOffset:], 32)
		}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newQueue(size)
			r, err := NewQueueReader(m)
			if err != nil {
				t.Fatal(err)
			}
			tc.set(m)
			got, err := r.Next(make([]byte, MaxMessage))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Next = %d bytes, %v; want %v", len(got), err, tc.want)
			}
		})
	}
}

// TestQueueCrossingTheEnd: a message may not run past the data area's end
// (the writer pads instead).
func TestQueueCrossingTheEnd(t *testing.T) {
	m := newQueue(MinQueueData)
	w, _ := NewQueueWriter(m)
	r, _ := NewQueueReader(m)
	buf := make([]byte, MaxMessage)
	// Fill to 32 bytes short of the end and consume it.
	for w.tail < MinQueueData-32 {
		n := min(MaxMessage, int(MinQueueData-32-w.tail))
		if !w.Put(message(n, 1)) {
			t.Fatalf("Put(%d) refused", n)
		}
		if _, err := r.Next(buf); err != nil {
			t.Fatal(err)
		}
	}
	// A 64-byte message written in place, across the end, by hand.
	copy(m[QueueHeaderSize+MinQueueData-32:], message(64, 2)[:32])
	binary.LittleEndian.PutUint64(m[QueueTailOffset:], w.tail+64)
	if got, err := r.Next(buf); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Next = %d bytes, %v; want ErrMalformed", len(got), err)
	}
}

// TestQueueSleepAndKick: one kick answers one sleep, and a daemon that
// finds entries when it would sleep does not.
func TestQueueSleepAndKick(t *testing.T) {
	m := newQueue(MinQueueData)
	w, _ := NewQueueWriter(m)
	r, _ := NewQueueReader(m)
	if w.NeedKick() {
		t.Fatal("kick before the daemon slept")
	}
	if !r.Sleep() {
		t.Fatal("Sleep on an empty queue = false")
	}
	if !w.Put(message(32, 1)) {
		t.Fatal("Put refused")
	}
	if !w.NeedKick() {
		t.Fatal("no kick after the daemon slept")
	}
	if w.NeedKick() {
		t.Fatal("a second kick for one sleep")
	}
	r.Awake()
	if r.Sleep() {
		t.Fatal("Sleep with an entry pending = true")
	}
	if w.NeedKick() {
		t.Fatal("kick while the daemon drains")
	}
}

// FuzzQueueReader feeds arbitrary queue contents and tails to the reader:
// it must not panic, must stop, and every message it returns must be one
// its header describes, within the limits.
func FuzzQueueReader(f *testing.F) {
	f.Add(message(32, 1), uint64(32))
	f.Add(message(16, 2), uint64(1<<40))
	pad := make([]byte, 16)
	binary.LittleEndian.PutUint16(pad, uint16(OpPad))
	binary.LittleEndian.PutUint32(pad[4:], MinQueueData)
	f.Add(pad, uint64(MinQueueData))
	f.Fuzz(func(t *testing.T, data []byte, tail uint64) {
		m := newQueue(MinQueueData)
		r, err := NewQueueReader(m)
		if err != nil {
			t.Fatal(err)
		}
		copy(m[QueueHeaderSize:], data)
		binary.LittleEndian.PutUint64(m[QueueTailOffset:], tail)
		buf := make([]byte, MaxMessage)
		for range MinQueueData/QueueAlign + 1 {
			msg, err := r.Next(buf)
			if err != nil || msg == nil {
				return
			}
			if n := binary.LittleEndian.Uint32(msg[4:]); int(n) != len(msg) || n < HeaderSize || n > MaxMessage {
				t.Fatalf("message of %d bytes says %d", len(msg), n)
			}
		}
		t.Fatal("the reader did not stop")
	})
}
