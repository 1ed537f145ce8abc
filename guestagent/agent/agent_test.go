package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/mdev/agentchan"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// host is a vgpud agent channel (the real host end) on path.
type host struct {
	s    *agentchan.Server
	done *atomic.Uint32
	errc chan error
}

func startHost(t *testing.T, path string, done *atomic.Uint32) *host {
	t.Helper()
	s, err := agentchan.Listen(agentchan.Config{Path: path, Done: done.Load, Logger: quiet, Ident: "host"})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{s: s, done: done, errc: make(chan error, 1)}
	go func() { h.errc <- s.Serve(context.Background()) }()
	t.Cleanup(h.stop)
	return h
}

func (h *host) stop() {
	h.s.Close()
	<-h.errc
	h.errc <- nil // a second stop returns at once
}

// complete marks command index done on the host and notifies.
func (h *host) complete(index uint32) {
	h.done.Store(index + 1)
	h.s.Notify(index)
}

func dialer(path string) func() (io.ReadWriteCloser, error) {
	return func() (io.ReadWriteCloser, error) { return net.Dial("unix", path) }
}

func runClient(t *testing.T, open func() (io.ReadWriteCloser, error), opts Options) *Client {
	t.Helper()
	opts.ReopenDelay = time.Millisecond
	opts.Logger = quiet
	c := New(open, opts)
	runUntilStopped(t, c)
	return c
}

// waitConnected waits until c is ready on its n-th connection.
func waitConnected(t *testing.T, c *Client, n uint64) {
	t.Helper()
	for {
		ch := c.Changed()
		if c.Connected() && c.Connects() >= n {
			return
		}
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("client not connected (connection %d)", n)
		}
	}
}

// blockOn blocks c until the host reports index done, in the background.
func blockOn(c *Client, h *host, index uint32) chan error {
	errc := make(chan error, 1)
	go func() {
		errc <- c.BlockUntil(index, func() bool { return h.done.Load() > index }, time.Now().Add(time.Minute))
	}()
	return errc
}

// waitWatch waits until the host has received n Watch messages.
func waitWatch(t *testing.T, h *host, n uint64, c *Client) {
	t.Helper()
	for h.s.Stats().Watches.Load() < n {
		select {
		case <-c.Changed():
		case <-time.After(10 * time.Millisecond): // the host's counter has no channel
		}
	}
}

func TestBlockUntilWokenByHost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	var done atomic.Uint32
	h := startHost(t, path, &done)
	c := runClient(t, dialer(path), Options{Ident: "test"})
	waitConnected(t, c, 1)
	errc := blockOn(c, h, 2)
	waitWatch(t, h, 1, c)
	h.complete(2)
	if err := <-errc; err != nil {
		t.Fatalf("BlockUntil() = %v", err)
	}
	// The host's Completed reaches the client. BlockUntil itself may have
	// returned a moment earlier, on its periodic re-check of done (which
	// reads the host's counter here): asserting at once raced with the
	// message under load.
	for {
		ch := c.Changed()
		if c.Done() >= 3 {
			break
		}
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("no Completed from the host reached the client (done %d, host wakeups %d)", c.Done(), h.s.Stats().Wakeups.Load())
		}
	}
}

// TestReconnectAfterHostRestart: the host side goes away and comes back at
// the same path; the client reopens and a blocked waiter re-arms its watch
// on the new connection.
func TestReconnectAfterHostRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	var done atomic.Uint32
	h1 := startHost(t, path, &done)
	c := runClient(t, dialer(path), Options{})
	waitConnected(t, c, 1)
	errc := blockOn(c, h1, 5)
	waitWatch(t, h1, 1, c)
	h1.stop()
	h2 := startHost(t, path, &done)
	waitConnected(t, c, 2)
	waitWatch(t, h2, 1, c)
	h2.complete(5)
	if err := <-errc; err != nil {
		t.Fatalf("BlockUntil() across a host restart = %v", err)
	}
}

func TestBlockUntilDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	var done atomic.Uint32
	startHost(t, path, &done)
	c := runClient(t, dialer(path), Options{})
	err := c.BlockUntil(1, func() bool { return false }, time.Now().Add(time.Millisecond))
	if err == nil {
		t.Fatalf("BlockUntil past its deadline = nil")
	}
}

func TestGuestStatsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	var done atomic.Uint32
	h := startHost(t, path, &done)
	c := runClient(t, dialer(path), Options{StatsEvery: time.Millisecond, ReadStats: func() (agentmsg.GuestStats, error) {
		return agentmsg.GuestStats{User: 11}, nil
	}})
	waitConnected(t, c, 1)
	for {
		if gs, ok := h.s.GuestStats(); ok {
			if gs.User != 11 {
				t.Errorf("host saw guest stats %+v", gs)
			}
			return
		}
		select {
		case <-c.Changed():
		case <-time.After(10 * time.Millisecond): // the host's stats have no channel
		}
	}
}

// TestRelay: a guest program blocks through vgpu-agent's relay.
// serveRelay serves a relay for up on path until the end of the test.
func serveRelay(t *testing.T, up *Client, path string) *Relay {
	t.Helper()
	r, err := NewRelay(up, path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	rerr := make(chan error, 1)
	go func() { rerr <- r.Serve(context.Background()) }()
	t.Cleanup(func() {
		r.Close()
		if err := <-rerr; err != nil {
			t.Errorf("relay Serve() = %v", err)
		}
	})
	return r
}

// startRelayed starts a fake host, the agent's client connected to it
// and the agent's relay; it returns the host, the client and the relay's
// socket.
func startRelayed(t *testing.T) (*host, *Client, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")
	var done atomic.Uint32
	h := startHost(t, path, &done)
	up := runClient(t, dialer(path), Options{})
	relaySock := filepath.Join(dir, "relay.sock")
	serveRelay(t, up, relaySock)
	return h, up, relaySock
}

func TestRelay(t *testing.T) {
	h, up, relaySock := startRelayed(t)
	prog := runClient(t, DialRelay(relaySock), Options{})
	waitConnected(t, prog, 1)
	errc := blockOn(prog, h, 9)
	waitWatch(t, h, 1, up)
	h.complete(9)
	if err := <-errc; err != nil {
		t.Fatalf("BlockUntil through the relay = %v", err)
	}
}

func TestParseProcStat(t *testing.T) {
	b := []byte("cpu  10 20 30 40 50 60 70 80 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nctxt 5\n")
	got, err := ParseProcStat(b)
	want := agentmsg.GuestStats{User: 10, Nice: 20, System: 30, Idle: 40, IOWait: 50, IRQ: 60, SoftIRQ: 70, Steal: 80}
	if err != nil || got != want {
		t.Errorf("ParseProcStat() = %+v, %v, want %+v", got, err, want)
	}
	for _, bad := range []string{"", "cpu  x 1\n", "intr 1\n"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q) = nil error", bad)
		}
	}
}

func TestPortPath(t *testing.T) {
	sys := t.TempDir()
	for port, name := range map[string]string{"vport0p1": "other", "vport1p1": PortName} {
		d := filepath.Join(sys, "class/virtio-ports", port)
		if err := mkdirWrite(d, name+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := PortPath(sys, PortName)
	if err != nil || got != "/dev/vport1p1" {
		t.Errorf("PortPath() = %q, %v, want /dev/vport1p1", got, err)
	}
	if _, err := PortPath(sys, "missing"); err == nil {
		t.Errorf("PortPath(missing) = nil error")
	}
}

// movingPort is the guest's end of a virtio-serial port whose host side
// is switched to another vgpud without the guest noticing, as when QEMU
// migrates the VM: the guest's connection never ends.
type movingPort struct {
	guest, mine net.Conn
	mu          sync.Mutex
	up          net.Conn // the current host connection
}

func newMovingPort(t *testing.T, path string) *movingPort {
	t.Helper()
	p := &movingPort{}
	p.guest, p.mine = net.Pipe()
	p.move(t, path)
	go func() { // guest -> current host
		buf := make([]byte, 4096)
		for {
			n, err := p.mine.Read(buf)
			if err != nil {
				return
			}
			p.mu.Lock()
			up := p.up
			p.mu.Unlock()
			up.Write(buf[:n])
		}
	}()
	t.Cleanup(func() {
		p.mine.Close()
		p.mu.Lock()
		p.up.Close()
		p.mu.Unlock()
	})
	return p
}

// move connects the port to the host at path, dropping the old one.
func (p *movingPort) move(t *testing.T, path string) {
	t.Helper()
	up, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	old := p.up
	p.up = up
	p.mu.Unlock()
	if old != nil {
		old.Close()
	}
	go io.Copy(p.mine, up) // host -> guest, until this host is dropped
}

// TestGreetsAgainAfterMigration: when the VM moves to another vgpud the
// guest's port never ends; the new host's greeting makes the agent greet
// again, so the new host knows it at once, and a wait in progress re-arms
// its watch there.
func TestGreetsAgainAfterMigration(t *testing.T) {
	dir := t.TempDir()
	var doneA, doneB atomic.Uint32
	a := startHost(t, filepath.Join(dir, "a.sock"), &doneA)
	b := startHost(t, filepath.Join(dir, "b.sock"), &doneB)
	port := newMovingPort(t, filepath.Join(dir, "a.sock"))
	opened := false
	c := runClient(t, func() (io.ReadWriteCloser, error) {
		if opened {
			return nil, errors.New("the port was reopened: the test wants one connection")
		}
		opened = true
		return port.guest, nil
	}, Options{})
	waitConnected(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.s.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	waiting := blockOn(c, b, 7)
	waitWatch(t, a, 1, c)
	port.move(t, filepath.Join(dir, "b.sock"))
	if err := b.s.WaitAgent(ctx); err != nil {
		t.Fatalf("the new host never heard the agent greet: %v", err)
	}
	waitWatch(t, b, 1, c)
	b.complete(7)
	if err := <-waiting; err != nil {
		t.Fatalf("wait across the move: %v", err)
	}
	if n := c.Connects(); n != 1 {
		t.Errorf("the agent opened its port %d times, want 1", n)
	}
}

// TestStoppingReachesPrograms: the host's Stopping reaches the agent and,
// through its relay, a guest program's OnStopping, with the drain time.
func TestStoppingReachesPrograms(t *testing.T) {
	h, up, relaySock := startRelayed(t)
	told := make(chan time.Duration, 1)
	prog := runClient(t, DialRelay(relaySock), Options{OnStopping: func(d time.Duration) { told <- d }})
	waitConnected(t, prog, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.s.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.s.Stopping(1500 * time.Millisecond) {
		t.Fatal("Stopping() = false with an agent connected")
	}
	select {
	case d := <-told:
		if d != 1500*time.Millisecond {
			t.Errorf("the program was told drain %v, want 1.5s", d)
		}
	case <-ctx.Done():
		t.Fatal("the program was never told that vgpud is stopping")
	}
	if n, d := up.Stopping(); n != 1 || d != 1500*time.Millisecond {
		t.Errorf("agent Stopping() = %d, %v", n, d)
	}
}
