package migrate_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// floodDestination serves dst (its Manager and TLS filled in here) on a
// loopback port until the test ends.
func floodDestination(t *testing.T, tlsDir string, dst *migrate.Destination) (*mdev.Manager, string) {
	t.Helper()
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
	}
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, SocketDir: t.TempDir(), Transport: mpqemu.Transport{}})
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	dst.Manager, dst.TLS = m, migratetest.Load(t, tlsDir)
	return m, serveDestination(t, dst, m, d)
}

// flood opens n plain TCP connections to addr that never send a byte and
// returns them with a channel that receives the index of each one the
// server closes (within a budget far longer than a handshake timeout; one
// the server keeps open is never reported). They are closed when the test
// ends.
func flood(t *testing.T, addr string, n int) ([]net.Conn, <-chan int) {
	t.Helper()
	conns := make([]net.Conn, n)
	closed := make(chan int, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		go func() {
			c.SetReadDeadline(time.Now().Add(time.Minute))
			_, err := c.Read(make([]byte, 1))
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
				closed <- i // EOF or a reset: the server closed it
			}
		}()
	}
	return conns, closed
}

// TestDestinationFloodCapped: of a flood of 3x MaxConns connections that
// never send a byte, the ones over the limit are closed at once (the
// handshake timeout is far away), the manager keeps creating instances,
// and once the flood ends a real peer is served again.
func TestDestinationFloodCapped(t *testing.T) {
	const max = 4
	ca := migratetest.NewCA(t)
	m, addr := floodDestination(t, ca.HostDir(t), &migrate.Destination{MaxConns: max, HandshakeTimeout: 10 * time.Minute})
	conns, closed := flood(t, addr, 3*max)
	refused := map[int]bool{}
	budget := time.NewTimer(30 * time.Second)
	defer budget.Stop()
	for len(refused) < 2*max {
		select {
		case i := <-closed:
			refused[i] = true
		case <-budget.C:
			t.Fatalf("%d of %d flood connections closed by the destination, want the %d over MaxConns %d closed at once",
				len(refused), len(conns), 2*max, max)
		}
	}
	if _, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Errorf("Create during the flood = %v, want an instance", err)
	}
	for i, c := range conns {
		if !refused[i] {
			c.Close()
		}
	}
	// The places come free as the destination notices the closes: a real
	// peer then gets through the handshake and is answered (here: its
	// stream does not start with a header).
	tc := migratetest.Load(t, ca.HostDir(t))
	var rep migrate.Reply
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rep, err = badStream(addr, tc); err == nil {
			break
		}
	}
	if err != nil || rep.Step != "instance" || rep.Error == "" {
		t.Errorf("a bad stream after the flood: reply %+v, %v; want an instance error", rep, err)
	}
}

// badStream connects to addr as a real peer, sends a stream with no
// header and returns the reply.
func badStream(addr string, tc *migrate.TLS) (migrate.Reply, error) {
	var rep migrate.Reply
	c, err := tls.Dial("tcp", addr, tc.Client("127.0.0.1"))
	if err != nil {
		return rep, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(make([]byte, 64)); err != nil {
		return rep, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return rep, err
	}
	return rep, json.Unmarshal(line, &rep)
}

// TestDestinationFloodPerHost: one address's flood holds only
// MaxConnsPerHost places; a peer from another address is served while it
// lasts.
func TestDestinationFloodPerHost(t *testing.T) {
	const perHost = 4
	ca := migratetest.NewCA(t)
	_, addr := floodDestination(t, ca.HostDir(t), &migrate.Destination{MaxConns: 16, MaxConnsPerHost: perHost, HandshakeTimeout: 10 * time.Minute})
	conns, closed := flood(t, addr, 4*perHost)
	budget := time.NewTimer(30 * time.Second)
	defer budget.Stop()
	for i := range len(conns) - perHost {
		select {
		case <-closed:
		case <-budget.C:
			t.Fatalf("%d of %d flood connections from one address closed, want the %d over MaxConnsPerHost %d",
				i, len(conns), len(conns)-perHost, perHost)
		}
	}
	tc := migratetest.Load(t, ca.HostDir(t)).Client("127.0.0.1")
	d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}, Config: tc}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("a peer from another address during the flood: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(make([]byte, 64)); err != nil {
		t.Fatalf("write: %v", err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	var rep migrate.Reply
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err != nil || rep.Step != "instance" || rep.Error == "" {
		t.Errorf("a bad stream from another address during the flood: reply %+v, %v; want an instance error", rep, err)
	}
}

// TestDestinationHandshakeTimeout: a connection that sends nothing, and
// one that completes the TLS handshake but sends no record, are both
// dropped after HandshakeTimeout, not after a step's minutes.
func TestDestinationHandshakeTimeout(t *testing.T) {
	ca := migratetest.NewCA(t)
	_, addr := floodDestination(t, ca.HostDir(t), &migrate.Destination{MaxConns: 8, HandshakeTimeout: 200 * time.Millisecond, StepTimeout: 10 * time.Minute})
	conns, closed := flood(t, addr, 4)
	for range conns {
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatal("a connection that sent nothing was still open after 30 s, want it dropped after HandshakeTimeout")
		}
	}
	c := dial(t, addr, ca.HostDir(t))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a silent authenticated peer: read = %v, want the connection dropped", err)
	}
}
