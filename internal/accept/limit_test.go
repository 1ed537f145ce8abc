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
			g := &Limit{Max: tc.max, Name: "test"}
			raw, accepted := serveLimited(t, g, 3*tc.max+1)

			closed := make(chan struct{}, 3*tc.max)
			for range 3 * tc.max {
				c, err := net.Dial("tcp", raw.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				noteClosed(c, closed)
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

// TestLimitPerHost: one address's flood gets PerHost places, the rest of
// its connections are closed at once, and another address still gets in.
func TestLimitPerHost(t *testing.T) {
	g := &Limit{Max: 8, PerHost: 2, Name: "test"}
	raw, accepted := serveLimited(t, g, 16)
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatalf("dial from %s: %v", from, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := make(chan struct{}, 6)
	for range 6 {
		noteClosed(dial("127.0.0.1"), closed)
	}
	for i := range 4 {
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of the 4 connections over PerHost 2 closed", i)
		}
	}
	dial("127.0.0.2")
	dial("127.0.0.2")
	var got []net.Conn
	for range 4 {
		select {
		case c := <-accepted:
			got = append(got, c)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d connections accepted, want 2 from each address", len(got))
		}
	}
	hosts := map[string]int{}
	for _, c := range got {
		hosts[c.RemoteAddr().(*net.TCPAddr).IP.String()]++
	}
	if hosts["127.0.0.1"] != 2 || hosts["127.0.0.2"] != 2 || g.Refused() != 4 {
		t.Errorf("accepted per address %v, refused %d; want 2 each, 4 refused", hosts, g.Refused())
	}
	for _, c := range got {
		c.Close()
	}
	g.mu.Lock()
	left := len(g.hosts)
	g.mu.Unlock()
	if g.Open() != 0 || left != 0 {
		t.Errorf("after closing all: Open() = %d, %d hosts counted; want 0, 0", g.Open(), left)
	}
}

// serveLimited listens on loopback behind g and accepts into the channel
// it returns (of room n) until the test ends; then it closes the listener
// and every connection accepted and not taken.
func serveLimited(t *testing.T, g *Limit, n int) (net.Listener, chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := g.Listener(raw)
	accepted := make(chan net.Conn, n)
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
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	return raw, accepted
}

// noteClosed sends on closed when the server closes c: a read fails
// otherwise than by its one-minute deadline or c's own Close.
func noteClosed(c net.Conn, closed chan<- struct{}) {
	go func() {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
			closed <- struct{}{}
		}
	}()
}
