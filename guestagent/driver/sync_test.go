package driver

import (
	"errors"
	"testing"
	"time"
)

// fakeClock advances by step every time it is read.
type fakeClock struct {
	now  time.Time
	step time.Duration
}

func (c *fakeClock) Now() time.Time {
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// fakeDevice completes a command at a fixed time on the fake clock.
type fakeDevice struct {
	clk    *fakeClock
	doneAt time.Time
}

func (f *fakeDevice) done() bool { return !f.clk.now.Before(f.doneAt) }

// fakeBlocker sleeps until the device is done, then wakes after latency.
type fakeBlocker struct {
	dev     *fakeDevice
	latency time.Duration
	calls   int
	index   uint32
}

func (b *fakeBlocker) BlockUntil(index uint32, done func() bool, deadline time.Time) error {
	b.calls++
	b.index = index
	if done() {
		return nil
	}
	if b.dev.doneAt.After(deadline) {
		b.dev.clk.now = deadline
		return ErrTimeout
	}
	b.dev.clk.now = b.dev.doneAt.Add(b.latency)
	return nil
}

type syncRig struct {
	clk *fakeClock
	dev *fakeDevice
	blk *fakeBlocker
	s   *Sync
}

func newRig(mode SyncMode, hints SliceHints, withBlocker bool) *syncRig {
	clk := &fakeClock{now: time.Unix(1000, 0), step: time.Microsecond}
	dev := &fakeDevice{clk: clk}
	blk := &fakeBlocker{dev: dev, latency: 300 * time.Microsecond}
	opts := SyncOptions{Mode: mode, Clock: clk, Hints: func() SliceHints { return hints }, Alpha: 0.5}
	if withBlocker {
		opts.Blocker = blk
	}
	return &syncRig{clk: clk, dev: dev, blk: blk, s: NewSync(opts)}
}

// wait runs one wait on key for a kernel of length k.
func (r *syncRig) wait(t *testing.T, key string, k time.Duration) {
	t.Helper()
	r.dev.doneAt = r.clk.now.Add(k)
	if err := r.s.Wait(key, 7, r.dev.done, time.Second); err != nil {
		t.Fatalf("Wait(%s, kernel %v) = %v", key, k, err)
	}
	if !r.dev.done() {
		t.Fatalf("Wait(%s) returned before the device was done", key)
	}
}

var contended = SliceHints{MeanSlice: 4 * time.Millisecond, Wait: 0.5, Valid: true}

func TestSyncPollNeverBlocks(t *testing.T) {
	r := newRig(SyncPoll, contended, true)
	for range 5 {
		r.wait(t, "k", 10*time.Millisecond)
	}
	if st := r.s.Stats(); r.blk.calls != 0 || st.Polled != 5 || st.Blocked != 0 {
		t.Errorf("poll: blocker calls %d, stats %+v, want 0 calls, 5 polled", r.blk.calls, st)
	}
}

func TestSyncBlockAlwaysBlocks(t *testing.T) {
	r := newRig(SyncBlock, SliceHints{}, true)
	for range 3 {
		r.wait(t, "k", 100*time.Microsecond)
	}
	if st := r.s.Stats(); r.blk.calls != 3 || st.Blocked != 3 || r.blk.index != 7 {
		t.Errorf("block: blocker calls %d (index %d), stats %+v, want 3 calls on index 7", r.blk.calls, r.blk.index, st)
	}
}

// TestSyncHybridAlgorithm1 walks the seed's Algorithm 1.
func TestSyncHybridAlgorithm1(t *testing.T) {
	t.Run("short kernel is polled once learnt", func(t *testing.T) {
		r := newRig(SyncHybrid, contended, true) // threshold 2 ms
		r.wait(t, "short", 500*time.Microsecond) // first: polls up to the threshold, sees it
		if r.blk.calls != 0 {
			t.Fatalf("first short wait blocked")
		}
		for range 5 {
			r.wait(t, "short", 400*time.Microsecond) // faster than the average: polled
		}
		if r.blk.calls != 0 {
			t.Errorf("short kernels faster than their average blocked %d times", r.blk.calls)
		}
		if got := r.s.Expected("short"); got < 400*time.Microsecond || got > 500*time.Microsecond {
			t.Errorf("Expected(short) = %v, want between 400us and 500us", got)
		}
	})
	t.Run("kernel longer than the threshold blocks instantly", func(t *testing.T) {
		r := newRig(SyncHybrid, contended, true)
		r.wait(t, "long", 10*time.Millisecond) // learns T_k: polls 2 ms, then blocks
		before := r.s.Stats().PollTime
		r.wait(t, "long", 10*time.Millisecond)
		st := r.s.Stats()
		if st.Blocked != 2 || st.PollTime-before > 10*time.Microsecond {
			t.Errorf("long kernel: stats %+v, polled %v on the second wait; want it blocked at once", st, st.PollTime-before)
		}
	})
	t.Run("poll runs out at T_k then blocks", func(t *testing.T) {
		r := newRig(SyncHybrid, contended, true)
		r.wait(t, "k", time.Millisecond) // T_k = 1 ms
		before := r.s.Stats().PollTime
		r.wait(t, "k", 1500*time.Microsecond) // slower than usual
		st := r.s.Stats()
		polled := st.PollTime - before
		if st.Blocked != 1 || polled < time.Millisecond || polled > 1100*time.Microsecond {
			t.Errorf("slow wait: polled %v then blocked (%d); want ~1ms then a block", polled, st.Blocked)
		}
	})
	t.Run("uncontended threshold is MaxPoll", func(t *testing.T) {
		r := newRig(SyncHybrid, SliceHints{MeanSlice: time.Millisecond, Wait: 0.001, Valid: true}, true)
		if got := r.s.Threshold(); got != DefaultMaxPoll {
			t.Errorf("Threshold() uncontended = %v, want %v", got, DefaultMaxPoll)
		}
		r.wait(t, "k", 5*time.Millisecond)
		r.wait(t, "k", 4*time.Millisecond)
		if r.blk.calls != 0 {
			t.Errorf("uncontended 5 ms kernels blocked %d times", r.blk.calls)
		}
	})
}

func TestSyncThreshold(t *testing.T) {
	for _, tc := range []struct {
		h    SliceHints
		want time.Duration
	}{
		{SliceHints{}, DefaultMaxPoll},
		{SliceHints{MeanSlice: 4 * time.Millisecond, Wait: 0.5, Valid: true}, 2 * time.Millisecond},
		{SliceHints{MeanSlice: 4 * time.Millisecond, Wait: 0.01, Valid: true}, DefaultMaxPoll},
		{SliceHints{MeanSlice: time.Second, Wait: 0.5, Valid: true}, DefaultMaxPoll},
		{SliceHints{MeanSlice: 4 * time.Millisecond, Wait: 0.5}, DefaultMaxPoll},
	} {
		r := newRig(SyncHybrid, tc.h, true)
		if got := r.s.Threshold(); got != tc.want {
			t.Errorf("Threshold(%+v) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

// TestSyncAutoCoversSpread: a kernel whose time varies a little around
// its average is polled by Auto where Hybrid (budget exactly T_k) blocks
// about half the time.
func TestSyncAutoCoversSpread(t *testing.T) {
	times := []time.Duration{1000, 1040, 980, 1030, 1010, 1050, 990, 1040, 1020, 1045}
	blocks := map[SyncMode]int{}
	for _, mode := range []SyncMode{SyncHybrid, SyncAuto} {
		r := newRig(mode, contended, true)
		for _, us := range times {
			r.wait(t, "k", us*time.Microsecond)
		}
		blocks[mode] = r.blk.calls
	}
	if blocks[SyncAuto] != 0 || blocks[SyncHybrid] == 0 {
		t.Errorf("blocks: hybrid %d, auto %d; want hybrid > 0, auto 0", blocks[SyncHybrid], blocks[SyncAuto])
	}
}

func TestSyncAutoWithoutBlockerPolls(t *testing.T) {
	r := newRig(SyncAuto, contended, false)
	r.wait(t, "k", 50*time.Millisecond)
	if st := r.s.Stats(); st.Polled != 1 {
		t.Errorf("auto without blocker: %+v, want polled", st)
	}
	r2 := newRig(SyncBlock, contended, false)
	r2.dev.doneAt = r2.clk.now.Add(time.Millisecond)
	if err := r2.s.Wait("k", 1, r2.dev.done, time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("block without blocker = %v, want ErrInvalid", err)
	}
}

func TestSyncTimeout(t *testing.T) {
	for _, mode := range []SyncMode{SyncPoll, SyncBlock, SyncHybrid, SyncAuto} {
		r := newRig(mode, contended, true)
		r.dev.doneAt = r.clk.now.Add(time.Hour)
		if err := r.s.Wait("k", 1, r.dev.done, 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Errorf("%v: Wait past the deadline = %v, want ErrTimeout", mode, err)
		}
	}
}

func TestParseSyncMode(t *testing.T) {
	for _, m := range []SyncMode{SyncPoll, SyncBlock, SyncHybrid, SyncAuto} {
		got, err := ParseSyncMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseSyncMode(%q) = %v, %v, want %v", m.String(), got, err, m)
		}
	}
	if _, err := ParseSyncMode("spin"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseSyncMode(spin) = %v, want ErrInvalid", err)
	}
}

// TestSyncAutoWakeCost: under contention a 10 ms kernel exceeds the 2 ms
// remaining slice, so Hybrid blocks every wait. Auto polls its first wait
// to learn the kernel's own time; when the blocker's wake-up costs more
// than the kernel (20 ms), Auto measures that on its first blocked wait
// and polls from then on, re-probing once every AutoProbeEvery waits; when
// the wake-up is cheap (300 us) it blocks like Hybrid.
func TestSyncAutoWakeCost(t *testing.T) {
	const waits = 2*AutoProbeEvery + 2
	for _, tc := range []struct {
		name            string
		mode            SyncMode
		latency         time.Duration
		wantBlocks      int
		wantWakeAtLeast time.Duration
	}{
		{"hybrid, slow wake-up", SyncHybrid, 20 * time.Millisecond, waits, 0},
		// the first wait polls (learns the kernel), the second blocks
		// (learns the wake-up), then one probe after AutoProbeEvery
		// polled waits.
		{"auto, slow wake-up", SyncAuto, 20 * time.Millisecond, 2, 10 * time.Millisecond},
		{"auto, cheap wake-up", SyncAuto, 300 * time.Microsecond, waits - 1, 100 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(tc.mode, contended, true)
			r.blk.latency = tc.latency
			for range waits {
				r.wait(t, "k", 10*time.Millisecond)
			}
			if r.blk.calls != tc.wantBlocks {
				t.Errorf("blocked %d of %d waits, want %d", r.blk.calls, waits, tc.wantBlocks)
			}
			if got := r.s.WakeCost(); got < tc.wantWakeAtLeast {
				t.Errorf("WakeCost() = %v, want at least %v", got, tc.wantWakeAtLeast)
			}
		})
	}
}
