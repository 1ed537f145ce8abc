package guestmem

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestWriteLogRecordsEveryWritePath: with the log on, WriteAt, Store64 and
// a View that may write record the pages they touch (a write across a
// page boundary both pages); reads and read-only views record nothing;
// TakeWritten empties the log and keeps it on; off, nothing is recorded.
func TestWriteLogRecordsEveryWritePath(t *testing.T) {
	m, _ := pcLayout(t)
	buf := make([]byte, 64)
	if m.TakeWritten() != nil || m.Logging() {
		t.Fatal("a new map logs")
	}
	if err := m.WriteAt(buf, 0x1000); err != nil {
		t.Fatal(err)
	}
	m.LogWrites(true)
	steps := []struct {
		name string
		do   func() error
		want []uint64
	}{
		{"read", func() error { return m.ReadAt(buf, 0x3000) }, []uint64{}},
		{"read-only view", func() error {
			_, err := m.View(0x4000, 16, false, func([]byte) error { return nil })
			return err
		}, []uint64{}},
		{"write across a page boundary", func() error { return m.WriteAt(buf, 0x1ff0) }, []uint64{0x1000, 0x2000}},
		{"store", func() error { return m.Store64(0x100008, 7) }, []uint64{0x100000}},
		{"writing view", func() error {
			ok, err := m.View(0x105000, 0x2000, true, func(b []byte) error { b[0] = 1; return nil })
			if !ok {
				t.Error("view not lent")
			}
			return err
		}, []uint64{0x105000, 0x106000}},
		{"the same page twice", func() error {
			if err := m.WriteAt(buf[:8], 0x9000); err != nil {
				return err
			}
			return m.Store64(0x9ff8, 1)
		}, []uint64{0x9000}},
		{"a refused write", func() error {
			if err := m.WriteAt(buf, 0xa0000); err == nil {
				t.Error("a write into the hole succeeded")
			}
			return nil
		}, []uint64{}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := m.TakeWritten(); !slices.Equal(got, s.want) {
			t.Errorf("%s: written %#x, want %#x", s.name, got, s.want)
		}
	}
	if !m.Logging() {
		t.Error("TakeWritten turned the log off")
	}
	m.LogWrites(false)
	if err := m.WriteAt(buf, 0x1000); err != nil {
		t.Fatal(err)
	}
	if got := m.TakeWritten(); got != nil {
		t.Errorf("log off: %#x", got)
	}
}

// TestWriteLogProperty: the pages TakeWritten returns are exactly the
// pages touched by the writes since the last take, sorted, whatever the
// writes (rapid).
func TestWriteLogProperty(t *testing.T) {
	m, _ := pcLayout(t)
	rapid.Check(t, func(rt *rapid.T) {
		m.LogWrites(true)
		model := map[uint64]bool{}
		for range rapid.IntRange(0, 40).Draw(rt, "writes") {
			gpa := rapid.Uint64Range(0x100000, 2<<20-1).Draw(rt, "gpa")
			n := rapid.Uint64Range(1, min(3*4096, 2<<20-gpa)).Draw(rt, "n")
			if err := m.WriteAt(make([]byte, n), gpa); err != nil {
				rt.Fatal(err)
			}
			for p := gpa >> PageShift; p <= (gpa+n-1)>>PageShift; p++ {
				model[p<<PageShift] = true
			}
			if rapid.Bool().Draw(rt, "take") {
				checkTaken(rt, m.TakeWritten(), model)
				model = map[uint64]bool{}
			}
		}
		checkTaken(rt, m.TakeWritten(), model)
	})
}

func checkTaken(rt *rapid.T, got []uint64, model map[uint64]bool) {
	want := make([]uint64, 0, len(model))
	for p := range model {
		want = append(want, p)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		rt.Fatalf("taken %#x, want %#x", got, want)
	}
}

// TestInside: Inside checks a range against the map without touching it.
func TestInside(t *testing.T) {
	m, _ := pcLayout(t)
	for _, c := range []struct {
		gpa, n uint64
		ok     bool
	}{
		{0, 0xa0000, true},
		{0x9f000, 0x2000, false},
		{0x100000, 0x100000, true},
		{0x1ff000, 0x2000, false},
		{^uint64(0) - 10, 100, false},
	} {
		err := m.Inside(c.gpa, c.n)
		if (err == nil) != c.ok || (err != nil && !isBadAddress(err)) {
			t.Errorf("Inside(%#x, %#x) = %v, want ok %v", c.gpa, c.n, err, c.ok)
		}
	}
}
