package icdserver

import (
	"encoding/binary"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// computeFill has cl build the fill kernel as program prog, fill a new
// buffer buf of n words with v+i and read it back; it fails the test on
// any error or wrong word. Events evBase.. are used.
func computeFill(t *testing.T, cl *client, arena []byte, prog, buf uint32, v uint32, evBase uint64) {
	t.Helper()
	const n = 256
	if br := cl.build(0, prog, arena, fillSrc); br.Status != 0 {
		t.Fatalf("build status %v", abi.Status(br.Status))
	}
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: buf, Size: 4 * n, Event: evBase})
	cl.send(icdproto.OpLaunch, launchFill(prog, buf, n, v, evBase+1))
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: buf, Arena: 1, ArenaOffset: 4096, Length: 4 * n, Event: evBase + 2})
	for _, r := range cl.wait(evBase, evBase+1, evBase+2) {
		if r.Status != 0 {
			t.Fatalf("event %d: status %v, want OK", r.Event, abi.Status(r.Status))
		}
	}
	for i := 0; i < n; i++ {
		if got := binary.LittleEndian.Uint32(arena[4096+4*i:]); got != v+uint32(i) {
			t.Fatalf("element %d = %d, want %d", i, got, v+uint32(i))
		}
	}
}

// TestDeviceLostFailsInflight: the device context is lost (vgpud's worker
// ended) while a client's launch and read are in flight and the client
// waits for them. The device never completes them; the reaper notices the
// loss and the client's Wait answers with both events ended with
// StatusDeviceLost (the ICD turns that into a negative execution status)
// rather than "not complete" (after which the ICD waits again, for ever).
// The daemon reopens the device: the same client's old buffer reports the
// loss, while a new client, and the old one with new objects, compute
// correctly.
func TestDeviceLostFailsInflight(t *testing.T) {
	fx := newFixture(t)
	a, _ := fx.hello(t)
	arenaA := a.attach(1, 1<<20)
	computeFill(t, a, arenaA, 1, 1, 5, 1)

	fx.fakes[0].Hold() // the launch below runs "for ever"
	a.send(icdproto.OpLaunch, launchFill(1, 1, 256, 9, 10))
	a.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 4096, Length: 1024, Event: 11})
	a.send(icdproto.OpFlush, &icdproto.Flush{})
	fx.fakes[0].Lose()
	// The fixture's Wait gives up after 5 s and answers "not complete":
	// the records must say the events ended, and how.
	for _, r := range a.wait(10, 11) {
		if r.Status != uint32(abi.StatusDeviceLost) {
			t.Errorf("in-flight event %d after the loss: status %#x, want StatusDeviceLost (%d)", r.Event, r.Status, abi.StatusDeviceLost)
		}
	}

	b, _ := fx.hello(t)
	arenaB := b.attach(1, 1<<20)
	computeFill(t, b, arenaB, 1, 1, 1000, 1)

	a.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, ArenaOffset: 0, Length: 64, Event: 20})
	if r := a.wait(20); r[0].Status != uint32(abi.StatusDeviceLost) {
		t.Errorf("read of a buffer from before the loss: status %#x, want StatusDeviceLost", r[0].Status)
	}
	a.send(icdproto.OpBufferFree, &icdproto.BufferFree{Buffer: 1}) // unanswered: the Poll shows the connection lives
	a.call(icdproto.OpPoll, &icdproto.Wait{})
	computeFill(t, a, arenaA, 2, 2, 77, 30)
}

// TestDeviceLostWhileIdle: the device context is lost while nothing is in
// flight; the next client's Hello finds it lost and gets it reopened, so
// its first commands work.
func TestDeviceLostWhileIdle(t *testing.T) {
	fx := newFixture(t)
	a, _ := fx.hello(t)
	arena := a.attach(1, 1<<20)
	computeFill(t, a, arena, 1, 1, 5, 1)
	fx.fakes[0].Lose()
	b, _ := fx.hello(t)
	computeFill(t, b, b.attach(1, 1<<20), 1, 1, 50, 1)
}
