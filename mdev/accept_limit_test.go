package mdev

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestInstanceSocketFlood: of a flood of 3x MaxInstanceConns connections
// to an instance socket that never send a byte, the attached one and a
// few waiting their turn are held and the rest closed at once, each
// counted; the manager still creates instances.
func TestInstanceSocketFlood(t *testing.T) {
	old := attachGrace
	attachGrace = 10 * time.Minute // the waiting ones stay, for the count
	t.Cleanup(func() { attachGrace = old })
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	const n = 3 * MaxInstanceConns
	closed := make(chan struct{}, n)
	for i := range n {
		c, err := net.Dial("unix", inst.Socket())
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			if _, err := io.Copy(io.Discard, c); !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
				closed <- struct{}{}
			}
		}()
	}
	budget := time.NewTimer(60 * time.Second)
	defer budget.Stop()
	for i := range n - MaxInstanceConns {
		select {
		case <-closed:
		case <-budget.C:
			t.Fatalf("%d of %d connections closed by the instance socket, want the %d over MaxInstanceConns closed at once", i, n, n-MaxInstanceConns)
		}
	}
	if got := m.ConnsRefused(); got != n-MaxInstanceConns {
		t.Errorf("ConnsRefused() = %d, want %d", got, n-MaxInstanceConns)
	}
	if _, err := m.Create(CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Errorf("Create during the flood = %v, want an instance", err)
	}
}
