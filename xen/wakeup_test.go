package xen_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/xen"
	"github.com/vgpud/vgpud/xen/xentest"
)

// TestNoLostWakeup: the guest's first accesses, notified while the
// server is still starting its loop (its event channel not yet waited
// on), and back-to-back reads after them, are answered by the
// notification, never by the liveness check: with that an hour away, a
// lost wakeup leaves an access unanswered until the fake's IOTimeout.
// Serve is ended through its context: a domain's end is noticed by the
// liveness check at the latest, by design.
func TestNoLostWakeup(t *testing.T) {
	for i := range 200 {
		r := newRig(t)
		h, err := xentest.New(xentest.MinRAM, 2)
		if err != nil {
			t.Fatal(err)
		}
		h.IOTimeout = time.Minute
		srv := xen.NewServer(h, xen.Config{Domain: h.Domain(), SBDF: xentest.DefaultSBDF, Liveness: time.Hour}, r.dev())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		err = h.WaitServing(xentest.DefaultSBDF, wait)
		var g *xentest.Guest
		if err == nil {
			g, err = xentest.NewGuest(h, xentest.DefaultSBDF)
		}
		if err == nil {
			for j := range 10 {
				if v := g.Read32(abi.RegID); v != abi.IDMagic {
					t.Errorf("domain %d, read %d: RegID = %#x (%v), want %#x", i, j, v, g.Err(), abi.IDMagic)
					break
				}
			}
			g.Close()
		}
		if err != nil {
			t.Errorf("domain %d: %v", i, err)
		}
		cancel()
		select {
		case serr := <-done:
			if serr != nil && !errors.Is(serr, context.Canceled) {
				t.Errorf("domain %d: Serve after its context ended: %v, want nil or context.Canceled", i, serr)
			}
		case <-time.After(time.Minute):
			t.Fatalf("domain %d: Serve still running a minute after its context ended", i)
		}
		h.Close()
		if err != nil {
			t.FailNow()
		}
	}
}
