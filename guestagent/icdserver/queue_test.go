package icdserver

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// queuedRun sends, through cl's queue, more launches than the queue holds
// (so that it wraps, pads and fills up), then reads the buffer back and
// checks the last launch's values. It returns the requests it queued.
func queuedRun(t *testing.T, cl *client, arena []byte, launches int) int {
	t.Helper()
	const n = 256
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4 * n})
	if br := cl.build(0, 7, arena, fillSrc); br.Status != 0 {
		t.Fatalf("build status %v", abi.Status(br.Status))
	}
	for i := range launches {
		cl.send(icdproto.OpLaunch, launchFill(7, 1, n, uint32(i), 0))
	}
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 8192, Length: 4 * n, Event: 1})
	if recs := cl.wait(1); len(recs) != 1 || recs[0].Status != 0 {
		t.Fatalf("read: %+v", recs)
	}
	for i := range n {
		if got, want := binary.LittleEndian.Uint32(arena[8192+4*i:]), uint32(launches-1+i); got != want {
			t.Fatalf("element %d = %d, want %d (the last launch's)", i, got, want)
		}
	}
	return 4 + launches // buffer-create, build, the launches, read, wait
}

// TestQueueCarriesRequests is the mechanism test of the submission queue:
// once it is attached, no request goes over the socket but the kicks and
// drains the client needed, and the daemon's poll window spares the
// kicks: a daemon that looks at its queue for longer than the test runs
// is never kicked, and one that never looks is kicked after each sleep.
func TestQueueCarriesRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		poll time.Duration
	}{
		{"looking", time.Hour},
		{"default", 0},
		{"never looking", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixtureWith(t, func(c *Config) { c.QueuePoll = tc.poll })
			cl, _ := fx.hello(t)
			arena := cl.attach(1, 1<<17)
			cl.attachQueue(icdproto.MinQueueData)
			const launches = 2000 // about three times what the queue holds
			queued := queuedRun(t, cl, arena, launches)
			// As the ICD closes: a daemon looking at the queue then
			// reads the socket, and its end.
			cl.q.WantSocket()
			cl.c.Close()
			fx.waitIdle(t)
			st := fx.s.QueueStats()
			if st.Queued != uint64(queued) {
				t.Errorf("%d requests read from the queue, want %d", st.Queued, queued)
			}
			// Hello, Attach, Queue, then only what the queue needed.
			if want := uint64(3 + cl.kicks + cl.drains); st.Socket != want {
				t.Errorf("%d datagrams (kicks %d), want %d: 3 + %d kicks + %d drains", st.Socket, st.Kicks, want, cl.kicks, cl.drains)
			}
			if cl.drains == 0 {
				t.Errorf("%d launches of a queue of %d bytes needed no Drain", launches, icdproto.MinQueueData)
			}
			if st.Kicks != uint64(cl.kicks) || st.Kicks > st.Sleeps {
				t.Errorf("kicks: %d sent, %d received, after %d sleeps", cl.kicks, st.Kicks, st.Sleeps)
			}
			switch {
			case tc.poll > 0 && cl.kicks != 0:
				t.Errorf("%d kicks to a daemon that never stopped looking", cl.kicks)
			case tc.poll < 0 && cl.kicks == 0:
				t.Errorf("no kick to a daemon that never looks")
			}
		})
	}
}

// TestQueueVersion1: a version-1 connection has no queue (the op is
// unknown to it), and a Hello of a version past the daemon's is refused.
func TestQueueVersion1(t *testing.T) {
	fx := newFixture(t)
	cl := fx.connect(t)
	if r := cl.call(icdproto.OpHello, &icdproto.Hello{Version: 1}).(*icdproto.HelloReply); r.Version != 1 {
		t.Fatalf("hello reply version %d, want 1", r.Version)
	}
	fd, _ := memfd(t, icdproto.QueueHeaderSize+icdproto.MinQueueData, 0)
	cl.send(icdproto.OpQueue, &icdproto.Queue{Size: icdproto.QueueHeaderSize + icdproto.MinQueueData}, fd)
	cl.expectError(icdproto.ErrUnknownOp)
}

// TestQueueRefusals: a queue that is no queue is refused with a status and
// the connection goes on over the socket.
func TestQueueRefusals(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	for _, tc := range []struct {
		name  string
		size  int
		seals int
		want  icdproto.ErrCode
	}{
		{"not sealed", icdproto.QueueHeaderSize + icdproto.MinQueueData, 0, icdproto.ErrArena},
		{"too small", icdproto.QueueHeaderSize + icdproto.MinQueueData/2, 0, icdproto.ErrRange},
		{"not a power of two", icdproto.QueueHeaderSize + 3*icdproto.MinQueueData, 0, icdproto.ErrMalformed},
	} {
		fd, _ := memfd(t, tc.size, tc.seals)
		r := cl.call(icdproto.OpQueue, &icdproto.Queue{Size: uint64(tc.size)}, fd).(*icdproto.QueueReply)
		if icdproto.ErrCode(r.Status) != tc.want {
			t.Errorf("%s: status %v, want %v", tc.name, icdproto.ErrCode(r.Status), tc.want)
		}
	}
	arena := cl.attach(1, 1<<17)
	queuedRun(t, cl, arena, 3)
}

// TestQueueHostile: a client that corrupts its queue ends its own
// connection with an Error; another client's work goes on.
func TestQueueHostile(t *testing.T) {
	le := binary.LittleEndian
	hello, _ := icdproto.Marshal(icdproto.OpHello, 9, &icdproto.Hello{Version: icdproto.Version})
	for _, tc := range []struct {
		name    string
		corrupt func(q []byte)
		want    icdproto.ErrCode
	}{
		{"tail past the area", func(q []byte) { le.PutUint64(q[icdproto.QueueTailOffset:], 1<<40) }, icdproto.ErrRange},
		{"tail unaligned", func(q []byte) { le.PutUint64(q[icdproto.QueueTailOffset:], 40) }, icdproto.ErrMalformed},
		{"garbage entry", func(q []byte) {
			for i := icdproto.QueueHeaderSize; i < icdproto.QueueHeaderSize+64; i++ {
				q[i] = 0xa5
			}
			le.PutUint64(q[icdproto.QueueTailOffset:], 64)
		}, icdproto.ErrMalformed},
		{"hello in the queue", func(q []byte) {
			copy(q[icdproto.QueueHeaderSize:], hello)
			le.PutUint64(q[icdproto.QueueTailOffset:], 32)
		}, icdproto.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			other, _ := fx.hello(t)
			otherArena := other.attach(1, 1<<17)
			other.attachQueue(icdproto.MinQueueData)

			cl, _ := fx.hello(t)
			cl.attach(1, 1<<17)
			q := cl.attachQueue(icdproto.MinQueueData)
			tc.corrupt(q)
			cl.kick()
			cl.expectError(tc.want)

			queuedRun(t, other, otherArena, 700)
		})
	}
}
