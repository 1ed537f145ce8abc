package worker

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/irqfd/irqfdtest"
)

// TestOldWorkerKicksRelayed: an instance on a worker of an earlier
// release (its HelloReply lacks wire.FeatureKicks; this one would answer
// a Kicks it does not know with success, and read nothing) does not hand
// it the kick eventfd: the main process takes each signal and publishes
// it in the instance page as the register file publishes a write of
// abi.RegRingKick, with the tail shadow's address the guest programmed.
func TestOldWorkerKicksRelayed(t *testing.T) {
	in := oldReleaseInstance(t)
	efd := irqfdtest.Eventfd(t, unix.EFD_NONBLOCK)
	in.TailShadow(0x2000)
	if err := in.TakeKicks(efd); err != nil {
		t.Fatal(err)
	}
	sh := in.Shared()
	for i := range 3 {
		irqfdtest.Add(t, efd, 1)
		for sh.RelayedKicks.Load() == uint64(i) { // the watcher takes it
			time.Sleep(time.Millisecond)
		}
	}
	if got := sh.DirectKicks.Load(); got != 0 {
		t.Errorf("DirectKicks = %d from a worker that reads none", got)
	}
	if sh.Rung.Load() != 1 || sh.Kick.Load() != 1 || sh.Shadow.Load() != 0x2000 {
		t.Errorf("page after the kicks: rung %d kick %d shadow %#x, want a kick of the shadow at 0x2000",
			sh.Rung.Load(), sh.Kick.Load(), sh.Shadow.Load())
	}
	if err := in.TakeKicks(-1); err != nil {
		t.Fatal(err)
	}
	// Let go of: the eventfd's signals stay in its counter.
	irqfdtest.Add(t, efd, 1)
	var b [8]byte
	if _, err := unix.Read(efd, b[:]); err != nil {
		t.Errorf("the kick after TakeKicks(-1) was read by someone: %v", err)
	}
}
