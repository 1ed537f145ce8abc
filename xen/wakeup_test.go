package xen_test

import (
	"context"
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
func TestNoLostWakeup(t *testing.T) {
	for i := range 200 {
		r := newRig(t)
		h, err := xentest.New(xentest.MinRAM, 2)
		if err != nil {
			t.Fatal(err)
		}
		h.IOTimeout = time.Minute
		srv := xen.NewServer(h, xen.Config{Domain: h.Domain(), SBDF: xentest.DefaultSBDF, Liveness: time.Hour}, r.dev())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(context.Background()) }()
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
		h.Close()
		select {
		case serr := <-done:
			if serr != nil {
				t.Errorf("domain %d: Serve after the domain went: %v, want nil", i, serr)
			}
		case <-time.After(time.Minute):
			t.Fatalf("domain %d: Serve still running a minute after the domain went (its wakeup lost)", i)
		}
		if err != nil {
			t.FailNow()
		}
	}
}
