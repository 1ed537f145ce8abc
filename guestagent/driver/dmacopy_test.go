package driver_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// TestWriteFromReadIntoStageNothing is the mechanism test of the guest's
// copies without staging (issue 42): WriteFrom and ReadInto move the
// bytes of the caller's DMA memory, at any offset and length, through
// the device and back, with no byte through the staging pool, one
// command each way however large the range (the fake device scatters its
// pages, so 24 MiB is 6,144 entries: a command per half pool would be
// 12 of them); Write and Read still stage, in chunks of half the pool.
func TestWriteFromReadIntoStageNothing(t *testing.T) {
	for _, tt := range []struct{ at, n int }{{0, 1}, {100, 4095}, {4096, 4096}, {7, 3<<20 + 123}, {5, 24 << 20}} {
		d, f := open(t, drivertest.Config{Seed: uint64(tt.n)}, driver.Options{StagingBytes: driver.MinStagingBytes, Slots: 8})
		src, err := f.Alloc(tt.at + tt.n)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := f.Alloc(tt.at + tt.n)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(uint64(tt.n), 2))
		for i := range src.Buf {
			src.Buf[i] = byte(r.Uint32())
		}
		b, err := d.CreateBuffer(uint64(tt.n) + 100)
		if err != nil {
			t.Fatal(err)
		}
		before := d.Stats()
		if err := d.WriteFrom(b, 100, src, tt.at, tt.n); err != nil {
			t.Fatalf("WriteFrom(%d bytes at %d) = %v", tt.n, tt.at, err)
		}
		if err := d.ReadInto(b, 100, dst, tt.at, tt.n); err != nil {
			t.Fatalf("ReadInto(%d bytes at %d) = %v", tt.n, tt.at, err)
		}
		inPlace := d.Stats()
		if err := d.Finish(); err != nil {
			t.Fatalf("Finish() = %v", err)
		}
		if !bytes.Equal(dst.Buf[tt.at:tt.at+tt.n], src.Buf[tt.at:tt.at+tt.n]) {
			t.Errorf("%d bytes at %d: ReadInto after WriteFrom differs", tt.n, tt.at)
		}
		if got := inPlace.StagedBytes - before.StagedBytes; got != 0 {
			t.Errorf("%d bytes at %d: %d bytes staged, want 0", tt.n, tt.at, got)
		}
		if got, want := inPlace.InPlaceBytes-before.InPlaceBytes, uint64(2*tt.n); got != want {
			t.Errorf("%d bytes at %d: %d bytes in place, want %d", tt.n, tt.at, got, want)
		}
		if got := inPlace.Commands - before.Commands; got != 2 {
			t.Errorf("%d bytes at %d: WriteFrom and ReadInto took %d commands, want 1 each", tt.n, tt.at, got)
		}
		// The same through Write and Read: staged.
		if err := d.Write(b, 100, src.Buf[tt.at:tt.at+tt.n]); err != nil {
			t.Fatal(err)
		}
		if err := d.Read(b, 100, dst.Buf[tt.at:tt.at+tt.n]); err != nil {
			t.Fatal(err)
		}
		staged := d.Stats()
		if got := staged.StagedBytes - inPlace.StagedBytes; got != uint64(2*tt.n) {
			t.Errorf("Write and Read staged %d bytes, want %d", got, 2*tt.n)
		}
	}
}

func TestWriteFromRejectsBadRanges(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{})
	m, err := f.Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ at, n int }{{-1, 10}, {0, 0}, {8000, 200}, {8193, 1}, {0, 1<<20 + 1}} {
		if err := d.WriteFrom(b, 0, m, tt.at, tt.n); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("WriteFrom(%d bytes at %d) = %v, want ErrInvalid", tt.n, tt.at, err)
		}
		if err := d.ReadInto(b, 0, m, tt.at, tt.n); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("ReadInto(%d bytes at %d) = %v, want ErrInvalid", tt.n, tt.at, err)
		}
	}
	short := driver.DMA{Buf: m.Buf, Pages: m.Pages[:1]}
	if err := d.WriteFrom(b, 0, short, 0, 10); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("WriteFrom with fewer pages than bytes = %v, want ErrInvalid", err)
	}
}
