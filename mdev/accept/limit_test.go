package accept

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// TestLimitFlood: a flood of 3x Max loopback connections that never send
// a byte leaves Max of them open on the server side; the rest are closed
// at once and counted. Closing one accepted connection (twice) frees one
// place, and the next connection gets it.
func TestLimitFlood(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
	}{{"one", 1}, {"four", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := &Limit{Max: tc.max, Name: "test"}
			l := g.Listener(raw)
			accepted := make(chan net.Conn, 3*tc.max+1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			defer func() {
				l.Close()
				wg.Wait()
				close(accepted)
				for c := range accepted {
					c.Close()
				}
			}()

			closed := make(chan struct{}, 3*tc.max)
			for range 3 * tc.max {
				c, err := net.Dial("tcp", raw.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				go func() {
					c.SetReadDeadline(time.Now().Add(time.Minute))
					if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
						closed <- struct{}{}
					}
				}()
			}
			for i := range 2 * tc.max {
				select {
				case <-closed:
				case <-time.After(30 * time.Second):
					t.Fatalf("%d of the %d connections over Max %d closed", i, 2*tc.max, tc.max)
				}
			}
			var held []net.Conn
			for range tc.max {
				held = append(held, <-accepted)
			}
			if g.Open() != tc.max || g.Refused() != uint64(2*tc.max) {
				t.Fatalf("Open, Refused = %d, %d; want %d, %d", g.Open(), g.Refused(), tc.max, 2*tc.max)
			}
			held[0].Close()
			held[0].Close()
			if g.Open() != tc.max-1 {
				t.Fatalf("Open after one Close (twice) = %d, want %d", g.Open(), tc.max-1)
			}
			c, err := net.Dial("tcp", raw.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case a := <-accepted:
				a.Close()
			case <-time.After(30 * time.Second):
				t.Fatal("a connection after a place came free was not accepted")
			}
			for _, h := range held[1:] {
				h.Close()
			}
			if g.Open() != 0 {
				t.Errorf("Open after closing all = %d, want 0", g.Open())
			}
		})
	}
}

// TestLimitZero: the zero Limit refuses nothing.
func TestLimitZero(t *testing.T) {
	var g Limit
	for range 100 {
		if !g.Acquire() {
			t.Fatal("Acquire() = false on the zero Limit")
		}
	}
	if g.Open() != 100 || g.Refused() != 0 {
		t.Errorf("Open, Refused = %d, %d; want 100, 0", g.Open(), g.Refused())
	}
}
