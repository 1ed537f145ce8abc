package kernelout

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// spare returns a descriptor number of this process's own for a test to
// capture (a copy of /dev/null), closed when the test ends.
func spare(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func start(t *testing.T, limit int) (*Capture, int) {
	t.Helper()
	fd := spare(t)
	c, err := Start(fd, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, fd
}

func write(t *testing.T, fd int, p []byte) {
	t.Helper()
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
}

// Everything written before Take is in what it returns, in order, however
// the writes and the drain interleave.
func TestTakeReturnsWhatWasWrittenBefore(t *testing.T) {
	c, fd := start(t, 1<<20)
	for round := range 200 {
		var want bytes.Buffer
		for i := range round % 7 {
			line := fmt.Appendf(nil, "round %d line %d\n", round, i)
			want.Write(line)
			write(t, fd, line)
		}
		got, dropped, err := c.Take(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) || dropped != 0 {
			t.Fatalf("round %d: took %q (%d dropped), want %q", round, got, dropped, want.Bytes())
		}
	}
}

// A writer that prints far more than the limit, with nobody taking, is
// never blocked: the excess is dropped and counted.
func TestWriterNeverBlocks(t *testing.T) {
	const limit = 64 << 10
	c, fd := start(t, limit)
	total := 0
	p := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	for range 128 {                                     // 8 MiB: far past a pipe's 64 KiB
		write(t, fd, p)
		total += len(p)
	}
	got, dropped, err := c.Take(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != limit || uint64(len(got))+dropped != uint64(total) {
		t.Fatalf("took %d bytes, %d dropped, of %d written (limit %d)", len(got), dropped, total, limit)
	}
	if !bytes.Equal(got, p[:limit]) {
		t.Fatalf("the kept bytes are not the first ones written")
	}
}

// Take(n) keeps the first n bytes; the rest count as dropped. Discard
// empties the capture.
func TestTakeBoundAndDiscard(t *testing.T) {
	c, fd := start(t, 1<<20)
	write(t, fd, []byte("hello, world\n"))
	got, dropped, err := c.Take(5)
	if err != nil || string(got) != "hello" || dropped != 8 {
		t.Fatalf("Take(5) = %q, %d, %v", got, dropped, err)
	}
	write(t, fd, []byte("stale output of an earlier kernel"))
	if err := c.Discard(); err != nil {
		t.Fatal(err)
	}
	write(t, fd, []byte("fresh"))
	got, dropped, err = c.Take(100)
	if err != nil || string(got) != "fresh" || dropped != 0 {
		t.Fatalf("after Discard: %q, %d, %v", got, dropped, err)
	}
}

// Bytes written concurrently with Takes are each returned once or counted
// dropped once, in order: nothing is lost or repeated.
func TestConcurrentWritesAndTakes(t *testing.T) {
	c, fd := start(t, 1<<20)
	const n = 20000
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := unix.Write(fd, fmt.Appendf(nil, "%08d", i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var all bytes.Buffer
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		got, dropped, err := c.Take(1 << 20)
		if err != nil || dropped != 0 {
			t.Fatalf("Take: %d dropped, %v", dropped, err)
		}
		all.Write(got)
	}
	if all.Len() != 8*n {
		t.Fatalf("took %d bytes, want %d", all.Len(), 8*n)
	}
	for i := range n {
		if want := fmt.Sprintf("%08d", i); string(all.Bytes()[8*i:8*i+8]) != want {
			t.Fatalf("record %d is %q", i, all.Bytes()[8*i:8*i+8])
		}
	}
}

// After Close, Take fails and writes to the descriptor fail rather than
// block.
func TestClose(t *testing.T) {
	fd := spare(t)
	c, err := Start(fd, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Take(10); err == nil {
		t.Fatal("Take after Close succeeded")
	}
	if _, err := unix.Write(fd, []byte("x")); err == nil {
		t.Fatal("a write after Close succeeded")
	}
	if _, err := Start(fd, 0); err == nil {
		t.Fatal("a limit of 0 was accepted")
	}
}
