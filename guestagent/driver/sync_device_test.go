package driver_test

import (
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

type recordBlocker struct{ indices []uint32 }

func (b *recordBlocker) BlockUntil(index uint32, done func() bool, deadline time.Time) error {
	b.indices = append(b.indices, index)
	for !done() {
		if time.Now().After(deadline) {
			return driver.ErrTimeout
		}
	}
	return nil
}

// TestFinishSync: FinishSync launches, fences and waits through the Sync,
// asking the blocker for the fence's ring index.
func TestFinishSync(t *testing.T) {
	for _, mode := range []driver.SyncMode{driver.SyncPoll, driver.SyncBlock, driver.SyncHybrid, driver.SyncAuto} {
		t.Run(mode.String(), func(t *testing.T) {
			d, _ := open(t, drivertest.Config{}, driver.Options{})
			var blk recordBlocker
			s := driver.NewSync(driver.SyncOptions{Mode: mode, Blocker: &blk})
			p, _, err := d.Build(fillSrc, "")
			if err != nil {
				t.Fatal(err)
			}
			b, err := d.CreateBuffer(64)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := d.Launch(p, "fill", driver.Range1(16, 0), driver.BufferArg(b), driver.Uint32Arg(uint32(i))); err != nil {
					t.Fatal(err)
				}
				if err := d.FinishSync(s, "fill"); err != nil {
					t.Fatalf("FinishSync() = %v", err)
				}
				if n := len(blk.indices); n > 0 && blk.indices[n-1] != d.Tail()-1 {
					t.Errorf("blocked on index %d, want the fence at %d", blk.indices[len(blk.indices)-1], d.Tail()-1)
				}
			}
			if st := s.Stats(); st.Waits != 3 || st.Polled+st.Blocked != 3 {
				t.Errorf("Stats() = %+v, want 3 waits", st)
			}
			if mode == driver.SyncPoll && len(blk.indices) != 0 {
				t.Errorf("poll mode blocked")
			}
			out := make([]byte, 64)
			if err := d.Read(b, 0, out); err != nil || out[0] != 2 {
				t.Errorf("Read() = %v, out[0] = %d, want 2", err, out[0])
			}
		})
	}
}
