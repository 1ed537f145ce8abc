//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHostBackedBuffers checks that PoCL's CPU devices get host-backed
// buffers and that the device and the host see each other's bytes through
// them: a write lands where a kernel reads, a kernel's result is in the
// buffer's memory, a write or read is a memory copy (Host shows the bytes
// Write put there), a new buffer is zero, and Host refuses while a launch
// is enqueued.
func TestHostBackedBuffers(t *testing.T) {
	everyDevice(t, func(t *testing.T, in Info, e env) {
		t.Logf("%s on %s: host-backed %v", in.Name, in.Platform, e.d.(*device).hostBacked)
		if !e.d.(*device).hostBacked {
			if in.Platform == "Portable Computing Language" {
				t.Fatalf("PoCL device %s is not host-backed: the probe failed", in.Name)
			}
			return
		}
		hostBacked(t, e)
	})
}

func hostBacked(t *testing.T, e env) {
	const n = 256
	size := uint64(4 * n)
	ba, bb, bc := alloc(t, e.q, size), alloc(t, e.q, size), alloc(t, e.q, 2<<20)
	defer ba.Release()
	defer bb.Release()
	defer bc.Release()
	for _, b := range []Buffer{ba, bc} {
		ok, err := b.(HostBuffer).Host(0, b.Size(), func(p []byte) error {
			if !bytes.Equal(p, make([]byte, len(p))) {
				t.Errorf("new %d-byte buffer is not zero", len(p))
			}
			return nil
		})
		if !ok || err != nil {
			t.Fatalf("Host(new buffer) = %v, %v; want true", ok, err)
		}
	}
	a := make([]float32, n)
	for i := range a {
		a[i] = float32(i)
	}
	if err := e.q.Write(ba, 0, f32s(a...)); err != nil {
		t.Fatalf("Write = %v", err)
	}
	// The host writes b in place; the kernel must see it.
	if _, err := bb.(HostBuffer).Host(0, size, func(p []byte) error {
		copy(p, f32s(a...))
		return nil
	}); err != nil {
		t.Fatalf("Host(b) = %v", err)
	}
	k := kernelOf(t, e.p, "vadd")
	r := NDRange{Dims: 1, Global: [3]uint64{n}}
	pl := e.q.(Pipeliner)
	if err := pl.Enqueue(k, r, []Arg{{Buffer: ba}, {Buffer: bb}, {Buffer: bc}}); err != nil {
		t.Fatalf("Enqueue = %v", err)
	}
	if ok, _ := bc.(HostBuffer).Host(0, 4, func([]byte) error { return nil }); ok {
		t.Fatal("Host with a launch enqueued = true")
	}
	for _, res := range pl.Sync() {
		if res.Err != nil {
			t.Fatalf("Sync = %v", res.Err)
		}
	}
	ok, err := bc.(HostBuffer).Host(0, size, func(p []byte) error {
		for i, got := range toF32s(p) {
			if want := 2 * a[i]; got != want {
				return errors.New("c[" + strconv.Itoa(i) + "] = " + strconv.FormatFloat(float64(got), 'g', -1, 32))
			}
		}
		return nil
	})
	if !ok || err != nil {
		t.Fatalf("Host(c) after the launch = %v, %v", ok, err)
	}
	if ok, err := bc.(HostBuffer).Host(2<<20-4, 8, func([]byte) error { return nil }); ok || !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Host past the end = %v, %v; want ErrOutOfRange", ok, err)
	}
	bc.Release()
	if ok, _ := bc.(HostBuffer).Host(0, 4, func([]byte) error { return nil }); ok {
		t.Fatal("Host of a released buffer = true")
	}
}

// TestOpenPlainIsNotHostBacked: OpenPlain's buffers are device memory, as
// an application's are: Host lends nothing, and writes and reads still
// work (as commands).
func TestOpenPlainIsNotHostBacked(t *testing.T) {
	q := newQueue(t, openPlain(t))
	b := alloc(t, q, 4096)
	if ok, err := b.(HostBuffer).Host(0, 4096, func([]byte) error { return nil }); ok || err != nil {
		t.Errorf("Host on an OpenPlain device = %v, %v; want false, nil", ok, err)
	}
	p, got := bytes.Repeat([]byte{7}, 4096), make([]byte, 4096)
	if err := q.Write(b, 0, p); err != nil {
		t.Fatal(err)
	}
	if err := q.Read(b, 0, got); err != nil || !bytes.Equal(got, p) {
		t.Errorf("Read after Write = %v, equal %v", err, bytes.Equal(got, p))
	}
}

// TestBuffersOnCallerMemory: a host-backed device makes a buffer on
// memory its caller owns (an executor's arena): a kernel reads what the
// caller stored there and its result is there, the runtime lets go of
// the memory on ReleaseOn, and a device that is not host-backed refuses.
func TestBuffersOnCallerMemory(t *testing.T) {
	everyDevice(t, func(t *testing.T, in Info, e env) {
		ha := e.q.(HostAllocator)
		const n, page = 1024, 4096
		arena, err := unix.Mmap(-1, 0, 4*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(arena)
		if !e.d.(*device).hostBacked {
			if _, err := ha.AllocOn(arena[:page]); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("AllocOn on a device that is not host-backed = %v, want ErrUnsupported", err)
			}
			return
		}
		a, b, c := arena[:page], arena[page:2*page], arena[2*page:3*page]
		bufs := make([]Buffer, 3)
		for i, p := range [][]byte{a, b, c} {
			if bufs[i], err = ha.AllocOn(p); err != nil {
				t.Fatalf("AllocOn = %v", err)
			}
		}
		want := make([]float32, n)
		for i := range want {
			want[i] = float32(i)
		}
		copy(a, f32s(want...))
		copy(b, f32s(want...))
		if _, err := e.q.Launch(kernelOf(t, e.p, "vadd"), NDRange{Dims: 1, Global: [3]uint64{n}}, []Arg{{Buffer: bufs[0]}, {Buffer: bufs[1]}, {Buffer: bufs[2]}}); err != nil {
			t.Fatalf("Launch = %v", err)
		}
		for i, got := range toF32s(c) {
			if got != 2*want[i] {
				t.Fatalf("c[%d] in the caller's memory = %v, want %v", i, got, 2*want[i])
			}
		}
		// A read is a memory copy of the caller's memory, too.
		got := make([]byte, 8)
		if err := e.q.Read(bufs[2], 4, got); err != nil || !bytes.Equal(got, c[4:12]) {
			t.Fatalf("Read = %v, %x; want %x", err, got, c[4:12])
		}
		for _, bb := range bufs {
			if !ha.ReleaseOn(bb) {
				t.Errorf("ReleaseOn = false: the runtime kept the caller's memory after a finished queue")
			}
		}
		if _, err := ha.AllocOn(arena[1 : page+1]); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("AllocOn of unaligned memory = %v, want ErrInvalidArgument", err)
		}
	})
}
