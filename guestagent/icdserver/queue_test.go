package icdserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

const queuedItems = 256

// queuedSetup makes buffer 1 and program 7 (fill) for queuedLaunches.
func queuedSetup(t *testing.T, cl *client, arena []byte) {
	t.Helper()
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 4 * queuedItems})
	if br := cl.build(0, 7, arena, fillSrc); br.Status != 0 {
		t.Fatalf("build status %v", abi.Status(br.Status))
	}
}

// queuedLaunches sends launches of fill over buffer 1, reads the buffer
// back and checks the last launch's values.
func queuedLaunches(t *testing.T, cl *client, arena []byte, launches int) {
	t.Helper()
	for i := range launches {
		cl.send(icdproto.OpLaunch, launchFill(7, 1, queuedItems, uint32(i), 0))
	}
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 8192, Length: 4 * queuedItems, Event: 1})
	if recs := cl.wait(1); len(recs) != 1 || recs[0].Status != 0 {
		t.Fatalf("read: %+v", recs)
	}
	for i := range queuedItems {
		if got, want := binary.LittleEndian.Uint32(arena[8192+4*i:]), uint32(launches-1+i); got != want {
			t.Fatalf("element %d = %d, want %d (the last launch's)", i, got, want)
		}
	}
}

// queuedRun sends, through cl's queue, more launches than the queue holds
// (so that it wraps, pads and fills up), then reads the buffer back and
// checks the last launch's values. It returns the requests it queued.
func queuedRun(t *testing.T, cl *client, arena []byte, launches int) int {
	t.Helper()
	queuedSetup(t, cl, arena)
	queuedLaunches(t, cl, arena, launches)
	return 4 + launches // buffer-create, build, the launches, read, wait
}

// TestQueueCarriesRequests is the mechanism test of the submission queue:
// once it is attached, no request goes over the socket but the kicks and
// drains the client needed, and the daemon's poll window spares the
// kicks: a daemon that looks at its queue for longer than the test runs
// is kicked at most once per blocking request it answered (after which
// it does not look), and one that never looks finds nothing by looking
// (every kick it gets follows a sleep, as for all three).
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
			queuedSetup(t, cl, arena)
			// The device holds the launches until the client has
			// filled the queue and asks for a Drain.
			fx.fakes[0].Hold()
			var once sync.Once
			cl.onDrain = func() { once.Do(fx.fakes[0].Release) }
			queuedLaunches(t, cl, arena, launches)
			queued := 4 + launches
			const replied = 2 // the build and the wait
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
			case tc.poll > 0 && cl.kicks > replied:
				// It stops looking only after answering a blocking
				// request (the client needs a wake-up before it
				// writes again): at most one kick each.
				t.Errorf("%d kicks to a daemon that looks, after %d answered requests", cl.kicks, replied)
			case tc.poll < 0 && st.Polled != 0:
				// Whether it is kicked depends on whether it reached
				// its sleep before the client's next write (under load
				// the client may always find it awake); that it never
				// looked does not.
				t.Errorf("a daemon that never looks found %d requests by looking", st.Polled)
			}
		})
	}
}

// TestQueueVersion1: a version-1 connection has no queue: Queue, Kick and
// Drain are unknown to it.
func TestQueueVersion1(t *testing.T) {
	fx := newFixture(t)
	cl := fx.connect(t)
	if r := cl.call(icdproto.OpHello, &icdproto.Hello{Version: 1}).(*icdproto.HelloReply); r.Version != 1 {
		t.Fatalf("hello reply version %d, want 1", r.Version)
	}
	fd, _ := memfd(t, icdproto.QueueHeaderSize+icdproto.MinQueueData, 0)
	cl.send(icdproto.OpQueue, &icdproto.Queue{Size: icdproto.QueueHeaderSize + icdproto.MinQueueData}, fd)
	cl.expectError(icdproto.ErrUnknownOp)
	for _, op := range []icdproto.Op{icdproto.OpKick, icdproto.OpDrain} {
		cl := fx.connect(t)
		cl.call(icdproto.OpHello, &icdproto.Hello{Version: 1})
		cl.send(op, icdproto.NewBody(op))
		cl.expectError(icdproto.ErrUnknownOp)
	}
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

// scribblerEnv, in this test binary's environment, makes it the hostile
// client process of TestQueueRaces (TestMain runs scribble instead of
// the tests).
const scribblerEnv = "VGPUD_TEST_QUEUE_SCRIBBLER"

// scribble, run by TestQueueRaces as another process, maps the queue
// passed as fd 3 and rewrites it while the daemon reads it: well-formed
// entries, garbage, tails that go back, wrap and run ahead, the sleep
// word; then a tail no daemon can accept. (It does not write the head
// word: the daemon never reads it back, so that would only blind the
// scribbler.) It returns the process's exit code.
func scribble() int {
	size := icdproto.QueueHeaderSize + icdproto.MinQueueData
	m, err := unix.Mmap(3, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scribbler:", err)
		return 1
	}
	le := binary.LittleEndian
	data := m[icdproto.QueueHeaderSize:]
	flush, _ := icdproto.Marshal(icdproto.OpFlush, 1, &icdproto.Flush{})
	rng := rand.New(rand.NewPCG(1, 2))
	var tail uint64
	for i := range 200000 {
		head := le.Uint64(m[icdproto.QueueHeadOffset:]) // the daemon's
		switch r := rng.IntN(1000); {
		case r < 600: // a well-formed entry, where there is room
			off := tail % icdproto.MinQueueData
			if tail-head+16 <= icdproto.MinQueueData {
				copy(data[off:], flush)
				tail += 16
			}
		case r < 700: // garbage, most often where nobody reads
			off := rng.IntN(icdproto.MinQueueData - 64)
			for j := range 64 {
				data[off+j] = byte(rng.Uint32())
			}
		case r < 701: // the tail goes back, past what was read
			tail -= uint64(rng.IntN(4)) * 16
		case r < 800: // the daemon's sleep word
			le.PutUint32(m[icdproto.QueueSleepOffset:], rng.Uint32())
		case r < 995: // a pause: the daemon catches up and may sleep
			runtime.Gosched()
		default: // an entry rewritten while the daemon may be reading it
			off := head % icdproto.MinQueueData
			copy(data[off:off+16], flush)
			le.PutUint32(data[off+4:], uint32(rng.IntN(64)))
		}
		le.PutUint64(m[icdproto.QueueTailOffset:], tail)
		if i%1000 == 0 {
			runtime.Gosched()
		}
	}
	le.PutUint64(m[icdproto.QueueTailOffset:], tail+1<<40)
	return 0
}

// TestQueueRaces: a client process that rewrites its queue while the
// daemon reads it ends its own connection with an Error (or by the
// daemon closing it), and never another's: a well-behaved client beside
// it computes right throughout.
func TestQueueRaces(t *testing.T) {
	fx := newFixture(t)
	good, _ := fx.hello(t)
	goodArena := good.attach(1, 1<<17)
	good.attachQueue(icdproto.MinQueueData)
	queuedSetup(t, good, goodArena)

	bad, _ := fx.hello(t)
	bad.attach(1, 1<<17)
	size := icdproto.QueueHeaderSize + icdproto.MinQueueData
	fd, _ := memfd(t, size, unix.F_SEAL_SHRINK)
	if r := bad.call(icdproto.OpQueue, &icdproto.Queue{Size: uint64(size)}, fd).(*icdproto.QueueReply); r.Status != 0 {
		t.Fatalf("queue: status %v", icdproto.ErrCode(r.Status))
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), scribblerEnv+"=1")
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(fd), "queue")}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kicks while it scribbles, so that a sleeping daemon looks.
	kick, _ := icdproto.Marshal(icdproto.OpKick, 0, &icdproto.Kick{})
	scribbled := make(chan error, 1)
	go func() { scribbled <- cmd.Wait() }()
	for i := 0; ; i++ {
		select {
		case err := <-scribbled:
			if err != nil {
				t.Fatalf("scribbler: %v\n%s", err, out.String())
			}
			bad.c.Write(kick) //nolint:errcheck // the daemon may have closed it
			queuedLaunches(t, good, goodArena, 300)
			// The bad connection ends: an Error, then EOF (or EOF
			// alone if the daemon closed before the Error could be
			// sent).
			for {
				_, r := bad.recv()
				if r == nil {
					return
				}
				if _, ok := r.(*icdproto.Error); !ok {
					t.Fatalf("the scribbler's connection got %T, want an Error or the end", r)
				}
			}
		default:
		}
		if i%8 == 0 {
			bad.c.Write(kick) //nolint:errcheck
		}
		queuedLaunches(t, good, goodArena, 50)
	}
}

// TestQueueDrainAfterKick: a client kicks a sleeping daemon, then sets the
// sock word and sends Drain. The daemon reads the kick first; it must not
// take that for the request the word was set for, or it would look at
// the empty queue for its whole window (here an hour) with the Drain
// unread.
func TestQueueDrainAfterKick(t *testing.T) {
	fx := newFixtureWith(t, func(c *Config) { c.QueuePoll = time.Hour })
	cl, _ := fx.hello(t)
	cl.attach(1, 1<<17)
	cl.attachQueue(icdproto.MinQueueData)
	for range 3 {
		before := fx.s.QueueStats().Sleeps
		cl.call(icdproto.OpPoll, &icdproto.Wait{}) // answered: the daemon then sleeps at once
		deadline := time.Now().Add(time.Minute)
		for fx.s.QueueStats().Sleeps == before {
			if time.Now().After(deadline) {
				t.Fatal("the daemon did not sleep after answering")
			}
			runtime.Gosched()
		}
		flush, _ := icdproto.Marshal(icdproto.OpFlush, 0, &icdproto.Flush{})
		if !cl.q.Put(flush) {
			t.Fatal("no room")
		}
		cl.kick()
		if cl.kicks == 0 {
			t.Fatal("no kick to a sleeping daemon")
		}
		cl.q.WantSocket()
		cl.call(icdproto.OpDrain, &icdproto.Drain{})
	}
}
