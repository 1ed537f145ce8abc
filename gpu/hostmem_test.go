//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
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
	d, err := OpenPlain("")
	if err != nil {
		t.Fatalf("OpenPlain = %v", err)
	}
	defer d.Close()
	q := newQueue(t, d)
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
