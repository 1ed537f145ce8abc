package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
)

// rw is a request stream in and the replies out.
type rw struct {
	io.Reader
	out bytes.Buffer
}

func (r *rw) Write(p []byte) (int, error) { return r.out.Write(p) }

// FuzzServe: any byte stream of requests is answered or ends the
// connection with an error; the server never panics and answers every
// frame it read with a well-formed reply.
func FuzzServe(f *testing.F) {
	q := appendFrame(nil, 1, uint8(OpNewQueue), nil)
	alloc := appendFrame(nil, 2, uint8(OpAlloc), append(ints(1), make([]byte, 8)...))
	write := appendFrame(nil, 3, uint8(OpWrite), append(append(ints(1, 2), make([]byte, 8)...), 1, 2, 3, 4))
	build := appendFrame(nil, 4, uint8(OpBuild), append(append(ints(1, int32(len(vadd))), vadd...), 0, 0, 0, 0))
	kern := appendFrame(nil, 5, uint8(OpKernel), append(ints(1, 3), 4, 0, 'v', 'a', 'd', 'd'))
	launch := appendFrame(nil, 6, uint8(OpLaunch), append(append(ints(1, 4), 1), make([]byte, 72+2)...))
	f.Add(appendFrame(nil, 0, uint8(OpInfo), nil))
	f.Add(bytes.Join([][]byte{q, alloc, write, build, kern, launch}, nil))
	// A batch of two launches (OpLaunches): count, then two launch bodies.
	one := append(append(ints(4), 1), make([]byte, 72+2)...)
	batch := appendFrame(nil, 7, uint8(OpLaunches), append(append(ints(1), 2, 0), append(one, one...)...))
	f.Add(bytes.Join([][]byte{q, alloc, write, build, kern, batch}, nil))
	f.Add(bytes.Join([][]byte{q, appendFrame(nil, 9, uint8(OpRelease), append(ints(1), 1, 2, 0, 0, 0))}, nil))
	// A launch that prints (OpLaunchPrinting): the bound, then a launch body.
	printing := appendFrame(nil, 8, uint8(OpLaunchPrinting), append(append(ints(1, 64, 4), 1), make([]byte, 72+2)...))
	f.Add(bytes.Join([][]byte{q, alloc, write, build, kern, printing}, nil))
	f.Add(bytes.Join([][]byte{q, appendFrame(nil, 9, uint8(OpClose), nil)}, nil))
	// A buffer on the arena, written, then released.
	allocAt := appendFrame(nil, 2, uint8(OpAllocAt), append(append(ints(1), make([]byte, 8)...), 0, 16, 0, 0, 0, 0, 0, 0))
	f.Add(bytes.Join([][]byte{q, allocAt, write, appendFrame(nil, 9, uint8(OpRelease), append(ints(1), 1, 2, 0, 0, 0))}, nil))
	// A launch with an image argument and a sampler (argImage, argSampler).
	img := append(append(ints(4), 1), make([]byte, 72)...)
	img = append(img, 2, 0, argImage)
	img = append(append(img, ints(2, 0x10F1, 0x10B5, 0x10D2)...), make([]byte, 32)...)
	img = append(append(img, argSampler, 0), ints(0x1131, 0x1140)...)
	f.Add(bytes.Join([][]byte{q, alloc, write, build, kern, appendFrame(nil, 6, uint8(OpLaunch), append(ints(1), img...))}, nil))
	// The server's arena: 4 pages of memory the client would map too.
	arena := make([]byte, 4*ArenaPage)
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &rw{Reader: bytes.NewReader(in)}
		err := ServeWith(c, gputest.New(gputest.Config{HostBacked: true}), ServeOptions{Arena: arena, Output: &printout{data: []byte("printed")}})
		if err != nil && !errors.Is(err, ErrProtocol) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Serve = %v", err)
		}
		r := c.out.Bytes()
		for len(r) > 0 {
			fr, err := readFrame(bytes.NewReader(r))
			if err != nil {
				t.Fatalf("a reply does not decode: %v", err)
			}
			if fr.code != 0 {
				if _, log := decodeError(errKind(fr.code), fr.body); log != "" && !errors.Is(errKind(fr.code).sentinel(), gpu.ErrBuildFailed) {
					t.Errorf("an error other than a build's carries a log")
				}
			}
			r = r[9+len(fr.body):]
		}
	})
}

// fakeExecutor answers every request with the next of its canned bodies
// and statuses, then with errors.
type fakeExecutor struct {
	replies []byte // the fuzz input: for each reply, u8 status, u16 length, body
	pending []byte // the replies to send
}

func (e *fakeExecutor) Write(p []byte) (int, error) {
	f, err := readFrame(bytes.NewReader(p))
	if err != nil {
		return 0, err
	}
	if len(e.replies) < 3 {
		e.pending = append(e.pending, appendFrame(nil, f.seq, uint8(kindDevice), errorBody(errors.New("no more"), ""))...)
		return len(p), nil
	}
	st, n := e.replies[0], int(binary.LittleEndian.Uint16(e.replies[1:]))
	e.replies = e.replies[3:]
	n = min(n, len(e.replies))
	e.pending = append(e.pending, appendFrame(nil, f.seq, st, e.replies[:n])...)
	e.replies = e.replies[n:]
	return len(p), nil
}

// FuzzClient: whatever an executor answers, the client never panics and
// each call either succeeds with values in range or fails.
func FuzzClient(f *testing.F) {
	reply := func(st uint8, body []byte) []byte {
		return append(append([]byte{st}, binary.LittleEndian.AppendUint16(nil, uint16(len(body)))...), body...)
	}
	info := reply(0, []byte(`{"Name":"x","GlobalMemBytes":1}`))
	f.Add(bytes.Join([][]byte{info, reply(0, ints(1)), reply(0, ints(2)), reply(0, nil), reply(0, make([]byte, 4))}, nil))
	f.Add(bytes.Join([][]byte{info, reply(0, ints(1)), reply(uint8(kindOutOfMemory), errorBody(errors.New("oom"), ""))}, nil))
	f.Add(bytes.Join([][]byte{info, reply(0, ints(1)), reply(0, append(ints(3), 0, 0, 0, 0)), reply(0, ints(5, 2))}, nil))
	// A buffer in the executor's memory, then one on the arena: its handle,
	// a let-go of 1 for each release.
	f.Add(bytes.Join([][]byte{info, reply(0, ints(1)), reply(0, ints(2)), reply(0, nil), reply(0, make([]byte, 16)), reply(0, []byte{1}),
		reply(0, ints(3)), reply(0, []byte{1})}, nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		// The fake answers in the caller's goroutine: the client's reader
		// sees each reply only after the write, as with a real executor.
		ex := &fakeExecutor{replies: in}
		pr, pw := io.Pipe()
		conn := &pipeConn{ex: ex, pr: pr, pw: pw}
		d, err := NewDevice(conn)
		if err != nil {
			return
		}
		// An arena, as a worker's: a buffer of a page or more asks for
		// alloc-at, and its release's let-go flag decides its range.
		const arenaSize = 4 * ArenaPage
		arena, err := unix.Mmap(-1, 0, arenaSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		d.SetArena(arena) // unmapped by Close
		defer d.Close()
		q, err := d.NewQueue()
		if err != nil {
			return
		}
		for _, size := range []uint64{16, 2 * ArenaPage} {
			b, err := q.Alloc(size)
			if err == nil {
				p := make([]byte, size)
				_ = q.Write(b, 0, p)
				_ = q.Read(b, 0, p)
				b.Release()
			}
		}
		if free, kept := d.ArenaStats(); free+kept > arenaSize {
			t.Errorf("arena: %d bytes free and %d kept of %d", free, kept, arenaSize)
		}
		p, _, err := q.Build(vadd, "")
		if err == nil {
			_ = p.KernelNames()
			_, _ = p.Info()
			if k, err := p.Kernel("vadd"); err == nil {
				if k.NumArgs() > maxArgs {
					t.Errorf("NumArgs() = %d", k.NumArgs())
				}
				if ns, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{1}}, nil); err == nil && ns < 0 {
					t.Errorf("Launch time %v", ns)
				}
				ns, out, err := q.(gpu.Printer).LaunchPrinting(k, gpu.NDRange{Dims: 1, Global: [3]uint64{1}}, nil, 64)
				if err == nil && (ns < 0 || len(out.Data) > 64) {
					t.Errorf("LaunchPrinting: time %v, %d bytes printed of at most 64", ns, len(out.Data))
				}
			}
		}
		q.Close()
	})
}

// pipeConn connects the client to a fakeExecutor: requests go to the
// fake, which queues its replies; a pump copies them to the client's
// reader.
type pipeConn struct {
	ex *fakeExecutor
	pr *io.PipeReader
	pw *io.PipeWriter
}

func (c *pipeConn) Read(p []byte) (int, error) { return c.pr.Read(p) }

func (c *pipeConn) Write(p []byte) (int, error) {
	n, err := c.ex.Write(p)
	if err != nil {
		return n, err
	}
	out := c.ex.pending
	c.ex.pending = nil
	go c.pw.Write(out) // the reader takes it when it reads
	return n, nil
}

func (c *pipeConn) Close() error {
	c.pw.CloseWithError(io.EOF)
	return c.pr.Close()
}
