package aggregator

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// notifiedGuest plays a guest that programmed a poll word (ABI 1.6)
// around a paged ring: it stores its tail in its shadow, reads the poll
// word, and rings only when the loop does not say it polls; the loop's
// page poller reads the shadow as worker/child's does.
type notifiedGuest struct {
	*pagedRing
	shadow, word uint64
	kicked       int
	skipped      int
}

func newNotifiedGuest(t *testing.T, g *testGuest, window time.Duration) *notifiedGuest {
	t.Helper()
	if g.tail != 0 {
		t.Fatal("a notified guest starts on a fresh ring") // enabling restarts the indices
	}
	n := &notifiedGuest{shadow: g.alloc(8), word: g.alloc(8)}
	n.pagedRing = &pagedRing{g: g, sh: g.in.sh, shadows: true}
	g.in.DisableRing()
	if err := g.in.EnableRing(RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots, Shadow: n.shadow, PollWord: n.word}); err != nil {
		t.Fatalf("EnableRing with a poll word = %v", err)
	}
	g.in.SetPoll(n.apply)
	n.sh.PollWindow.Store(int64(window))
	return n
}

// send writes cmd into the ring and publishes the tail as the driver does.
func (n *notifiedGuest) send(cmd abi.Command) uint32 {
	g := n.g
	idx := g.tail
	var b [abi.CommandSize]byte
	cmd.Marshal(b[:])
	g.put(g.rb+uint64(g.tail%slots)*abi.CommandSize, b[:])
	g.tail++
	var t [4]byte
	binary.LittleEndian.PutUint32(t[:], g.tail)
	g.put(n.shadow, t[:]) // sliceMemory's lock orders it before the load
	if g.mem.load64(n.word) == abi.PollWordPolling {
		n.skipped++
		return idx
	}
	n.kicked++
	n.sh.Tail.Store(g.tail)
	n.sh.Rung.Store(1)
	if !n.sh.Polling() {
		go n.apply() // the bells goroutine, woken by the eventfd
	}
	return idx
}

// TestNotifiedRingLosesNoTail: whatever the gaps between a guest's
// commands and the loop's window (the loop polling, running out of its
// window, blocking, or coming back), a guest that skips its doorbell
// whenever the poll word says polling loses no command: each is seen by
// a poll or by the loop's last look, or rung. Both paths are taken.
func TestNotifiedRingLosesNoTail(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	n := newNotifiedGuest(t, g, 30*time.Microsecond)
	spinSetup(t, g, 64)
	rng := rand.New(rand.NewPCG(1, 42))
	const rounds = 300
	for k := range rounds {
		idx := n.send(g.spin(64, 64, 1))
		g.mustOK(g.wait(idx))
		// A gap of random length: none, inside the window, past it.
		switch rng.IntN(3) {
		case 1:
			for range rng.IntN(50) {
				runtime.Gosched()
			}
		case 2:
			end := time.Now().Add(time.Duration(rng.IntN(200)) * time.Microsecond)
			for time.Now().Before(end) {
				runtime.Gosched()
			}
		}
		if k == rounds-1 {
			break
		}
	}
	if n.kicked+n.skipped != rounds || n.kicked == 0 || n.skipped == 0 {
		t.Errorf("%d rounds: %d rung, %d skipped; want both paths taken", rounds, n.kicked, n.skipped)
	}
	if got := g.in.sh.ShadowTails.Load(); got < uint64(n.skipped) {
		t.Errorf("the loop found %d tails in the shadow, the guest skipped %d doorbells", got, n.skipped)
	}
	// Disabling stores idle: the guest may reuse the word's memory.
	g.in.DisableRing()
	if v := g.mem.load64(n.word); v != abi.PollWordIdle {
		t.Errorf("poll word %d after the ring was disabled, want idle", v)
	}
}

// TestNotifyHostileWords: a poll word or tail shadow the device cannot
// use refuses the ring with StatusBadAddress; a shadow with garbage in it
// is refused as a bad doorbell once per value, not at every poll, and the
// ring goes on with the next good tail.
func TestNotifyHostileWords(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	base := RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots}
	good := g.alloc(16)
	for _, tt := range []struct {
		name         string
		shadow, word uint64
	}{
		{"misaligned word", good + 8, good + 4},
		{"no shadow", 0, good},
		{"misaligned shadow", good + 10, good},
		{"word outside RAM", good + 8, ramSize + 8},
		{"shadow outside RAM", ramSize, good},
		{"shadow inside the word", good + 4, good},
	} {
		g.in.DisableRing()
		cfg := base
		cfg.Shadow, cfg.PollWord = tt.shadow, tt.word
		if err := g.in.EnableRing(cfg); abi.StatusOf(err) != abi.StatusBadAddress {
			t.Errorf("%s: EnableRing = %v, want StatusBadAddress", tt.name, err)
		}
	}
	n := newNotifiedGuest(t, g, time.Hour)
	spinSetup(t, g, 64)
	before := g.in.sh.ErrCount.Load()
	var garbage [4]byte
	binary.LittleEndian.PutUint32(garbage[:], g.tail+1000)
	g.put(n.shadow, garbage[:])
	for range 100 { // the loop polls it too
		if err := g.in.PollShadow(); err != nil {
			g.in.LatchError(abi.StatusOf(err))
		}
	}
	if errs := g.in.sh.ErrCount.Load() - before; errs != 1 {
		t.Errorf("a garbage shadow read 100 times and polled refused %d times, want once", errs)
	}
	g.mustOK(g.wait(n.send(g.spin(64, 64, 1))))
}
