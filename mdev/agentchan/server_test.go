package agentchan

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

type fakeHinter struct{ n atomic.Uint32 }

func (f *fakeHinter) Hints() (agentmsg.Hints, bool, error) {
	return agentmsg.Hints{MeanSliceNs: 3_000_000, WaitPPM: 500_000, VCPUs: f.n.Add(1)}, true, nil
}

// serve starts a Server on a temp socket; done is its completed count.
func serve(t *testing.T, cfg Config) (*Server, *atomic.Uint32) {
	t.Helper()
	var done atomic.Uint32
	cfg.Path = filepath.Join(t.TempDir(), "agent.sock")
	cfg.Done = done.Load
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := <-errc; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve() = %v, want ErrServerClosed", err)
		}
	})
	return s, &done
}

// peer is the guest side of a connection, as QEMU would relay it.
type peer struct {
	t *testing.T
	c *net.UnixConn
	r *agentmsg.Reader
}

func dial(t *testing.T, s *Server) *peer {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.Path(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer{t: t, c: c, r: agentmsg.NewReader(c)}
}

func (p *peer) send(m agentmsg.Message) {
	p.t.Helper()
	if _, err := p.c.Write(agentmsg.Marshal(m)); err != nil {
		p.t.Fatalf("write %v: %v", m.Type(), err)
	}
}

// next returns the next message that is not Hints.
func (p *peer) next() agentmsg.Message {
	p.t.Helper()
	for {
		m, err := p.r.Read()
		if err != nil {
			p.t.Fatalf("read: %v", err)
		}
		if _, ok := m.(*agentmsg.Hints); !ok {
			return m
		}
	}
}

// greeting reads the host's unprompted Hello, its first message.
func (p *peer) greeting() {
	p.t.Helper()
	m := p.next()
	h, ok := m.(*agentmsg.Hello)
	if !ok || h.MinVersion != agentmsg.MinVersion || h.MaxVersion != agentmsg.Version {
		p.t.Fatalf("first message %v %+v, want the host's hello with its version range", m.Type(), m)
	}
}

func (p *peer) hello() *agentmsg.Hello {
	p.t.Helper()
	p.greeting()
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Ident: "test"})
	m := p.next()
	h, ok := m.(*agentmsg.Hello)
	if !ok {
		p.t.Fatalf("first message %v, want hello", m.Type())
	}
	if _, ok := p.next().(*agentmsg.Completed); !ok {
		p.t.Fatalf("hello not followed by completed")
	}
	return h
}

// wantPong skips Completed messages up to the Pong with cookie.
func (p *peer) wantPong(cookie uint64) {
	p.t.Helper()
	for {
		switch m := p.next().(type) {
		case *agentmsg.Completed:
		case *agentmsg.Pong:
			if m.Cookie != cookie {
				p.t.Fatalf("pong cookie %d, want %d", m.Cookie, cookie)
			}
			return
		default:
			p.t.Fatalf("got %v, want pong", m.Type())
		}
	}
}

func (p *peer) wantCompleted(want uint32) {
	p.t.Helper()
	for {
		m := p.next()
		c, ok := m.(*agentmsg.Completed)
		if !ok {
			p.t.Fatalf("got %v, want completed", m.Type())
		}
		if c.Done >= want {
			return
		}
	}
}

func TestHelloWatchCompleted(t *testing.T) {
	s, done := serve(t, Config{Ident: "inst-1"})
	p := dial(t, s)
	h := p.hello()
	if h.Ident != "inst-1" || h.MaxVersion != agentmsg.Version || h.Features&agentmsg.FeatureWatch == 0 {
		t.Errorf("host hello = %+v", h)
	}

	// Watch index 4: completions 0..3 wake nobody, 4 does.
	p.send(&agentmsg.Watch{Index: 4})
	p.send(&agentmsg.Ping{Cookie: 1})
	p.wantPong(1)
	for i := range uint32(4) {
		done.Store(i + 1)
		s.Notify(i)
	}
	if got := s.Stats().Wakeups.Load(); got > 3 { // hello, ping (and its pong) only
		t.Errorf("wakeups before the watched index = %d", got)
	}
	done.Store(5)
	s.Notify(4)
	p.wantCompleted(5)

	// A watch on a command that already completed fires at once.
	p.send(&agentmsg.Watch{Index: 2})
	p.wantCompleted(5)
	if got := s.Stats().Watches.Load(); got != 2 {
		t.Errorf("Watches = %d, want 2", got)
	}
}

func TestWatchKeepsLowest(t *testing.T) {
	s, _ := serve(t, Config{})
	s.setWatch(10)
	s.setWatch(20)
	if got := uint32(s.watch.Load()); got != 10 {
		t.Errorf("watch after 10, 20 = %d, want 10", got)
	}
	s.setWatch(5)
	if got := uint32(s.watch.Load()); got != 5 {
		t.Errorf("watch after 5 = %d, want 5", got)
	}
	s.Notify(4)
	if s.watch.Load() == 0 {
		t.Errorf("Notify(4) cleared a watch on 5")
	}
	s.Notify(5)
	if s.watch.Load() != 0 {
		t.Errorf("Notify(5) left the watch on 5")
	}
	// Indices wrap: a watch on 1 after the counter wrapped is not
	// satisfied by 0xffffffff.
	s.setWatch(1)
	s.Notify(0xffffffff)
	if s.watch.Load() == 0 {
		t.Errorf("Notify(0xffffffff) satisfied a watch on 1")
	}
}

func TestHints(t *testing.T) {
	var fh fakeHinter
	s, _ := serve(t, Config{HintEvery: time.Millisecond, NewHinter: func(pid int) (Hinter, error) {
		if pid <= 0 {
			return nil, errors.New("no pid")
		}
		return &fh, nil
	}})
	p := dial(t, s)
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1})
	seen := 0
	for seen < 3 {
		m, err := p.r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := m.(*agentmsg.Hints); ok {
			seen++
			if h.MeanSliceNs != 3_000_000 {
				t.Errorf("hints = %+v", h)
			}
		}
	}
	if got := s.PeerPID(); got <= 0 {
		t.Errorf("PeerPID() = %d, want our pid", got)
	}
}

func TestGuestStats(t *testing.T) {
	s, _ := serve(t, Config{})
	p := dial(t, s)
	p.hello()
	p.send(&agentmsg.GuestStats{User: 7, Idle: 9})
	p.send(&agentmsg.Ping{Cookie: 77})
	p.wantPong(77)
	gs, ok := s.GuestStats()
	if !ok || gs.User != 7 || gs.Idle != 9 {
		t.Errorf("GuestStats() = %+v, %v", gs, ok)
	}
}

// TestMalformedDropsConnection: a bad frame drops that connection only;
// the next one is served.
func TestMalformedDropsConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"bad magic", []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"huge length", []byte{0x56, 0x47, 2, 0, 0xff, 0xff, 0xff, 0x7f}},
		{"short watch", []byte{0x56, 0x47, 2, 0, 1, 0, 0, 0, 9}},
		{"version from the future", agentmsg.Marshal(&agentmsg.Hello{MinVersion: 9, MaxVersion: 9})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := serve(t, Config{})
			p := dial(t, s)
			p.greeting()
			if _, err := p.c.Write(tc.b); err != nil {
				t.Fatal(err)
			}
			if m, err := p.r.Read(); err == nil {
				t.Fatalf("read after %s = %v, want the connection closed", tc.name, m.Type())
			}
			p2 := dial(t, s)
			p2.hello()
		})
	}
}

// TestSkipsBeforeHello: what a guest agent says before it greets this
// host (it greeted another one: the VM migrated here) is skipped, not
// acted on, and the connection stays: the host's greeting makes the agent
// greet again.
func TestSkipsBeforeHello(t *testing.T) {
	s, done := serve(t, Config{})
	p := dial(t, s)
	p.greeting()
	p.send(&agentmsg.Watch{Index: 0})
	p.send(&agentmsg.GuestStats{User: 1})
	p.send(&agentmsg.Ping{Cookie: 5})
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Ident: "migrated"})
	if _, ok := p.next().(*agentmsg.Hello); !ok {
		t.Fatal("no hello after the agent's late hello")
	}
	if _, ok := s.GuestStats(); ok {
		t.Error("guest stats sent before hello were taken")
	}
	p.send(&agentmsg.Ping{Cookie: 6})
	p.wantPong(6)
	p.send(&agentmsg.Watch{Index: 0})
	done.Store(1)
	s.Notify(0)
	p.wantCompleted(1)
}

// TestReconnectReplaces: a new connection (QEMU reconnecting) replaces the
// old one, which is closed, and starts with no watch.
func TestReconnectReplaces(t *testing.T) {
	s, done := serve(t, Config{})
	p1 := dial(t, s)
	p1.hello()
	p1.send(&agentmsg.Watch{Index: 3})
	p1.send(&agentmsg.Ping{Cookie: 1})
	p1.wantPong(1)
	p2 := dial(t, s)
	p2.hello()
	if _, err := p1.r.Read(); err == nil {
		t.Fatalf("old connection still open")
	}
	if got := s.Stats().Connections.Load(); got != 2 {
		t.Errorf("Connections = %d, want 2", got)
	}
	p2.send(&agentmsg.Watch{Index: 0})
	done.Store(1)
	s.Notify(0)
	p2.wantCompleted(1)
}

// TestDeadReaderDropped: a peer that never reads is disconnected by the
// write deadline, and Notify never blocks meanwhile.
func TestDeadReaderDropped(t *testing.T) {
	s, done := serve(t, Config{WriteTimeout: 20 * time.Millisecond})
	done.Store(1 << 30)
	p := dial(t, s)
	p.c.SetReadBuffer(4096)
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1})
	// Every Watch is already satisfied, so each asks for a Completed the
	// peer never reads. The peer's writes fail once the host gives up.
	frame := agentmsg.Marshal(&agentmsg.Watch{Index: 0})
	batch := make([]byte, 0, 64*len(frame))
	for range 64 {
		batch = append(batch, frame...)
	}
	for i := 0; ; i++ {
		s.Notify(uint32(i))
		if _, err := p.c.Write(batch); err != nil {
			break
		}
	}
	p2 := dial(t, s)
	p2.hello()
}

func TestCloseIdempotent(t *testing.T) {
	s, _ := serve(t, Config{})
	p := dial(t, s)
	p.hello()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if _, err := p.r.Read(); err == nil {
		t.Errorf("connection open after Close")
	}
}

// TestOnlyAttachedVMPeer: with Config.Peer naming the attached VM's
// process, a connection from another process (a QEMU left paused after a
// migration, its chardev reconnecting) is refused and leaves the current
// connection in place; from the attached VM it is served; with no VM
// attached (0) any process is.
func TestOnlyAttachedVMPeer(t *testing.T) {
	var vm atomic.Int64
	vm.Store(int64(os.Getpid() + 1)) // some other process is attached
	s, done := serve(t, Config{Peer: func() int { return int(vm.Load()) }})
	stranger := dial(t, s)
	if _, err := stranger.r.Read(); err == nil {
		t.Fatal("a process other than the attached VM was served")
	}
	if got := s.Stats().Refused.Load(); got != 1 || s.Connected() {
		t.Fatalf("Refused = %d, connected %t; want 1, false", got, s.Connected())
	}

	vm.Store(int64(os.Getpid())) // this process is the VM
	p := dial(t, s)
	p.hello()
	p.send(&agentmsg.Watch{Index: 0})
	if s.PeerPID() != os.Getpid() {
		t.Errorf("PeerPID = %d, want %d", s.PeerPID(), os.Getpid())
	}

	vm.Store(int64(os.Getpid() + 1)) // another VM now: this one is a stranger
	again := dial(t, s)
	if _, err := again.r.Read(); err == nil {
		t.Fatal("a second connection of a process not attached was served")
	}
	// The connection served before stays: it is woken as before.
	done.Store(1)
	s.Notify(0)
	p.wantCompleted(1)
	if got := s.Stats().Refused.Load(); got != 2 {
		t.Errorf("Refused = %d, want 2", got)
	}

	vm.Store(0) // no VM attached: any process
	free := dial(t, s)
	free.hello()
	if got := s.Stats().Connections.Load(); got != 2 {
		t.Errorf("Connections = %d, want 2", got)
	}
}

// TestWaitConnected: a wait for QEMU's connection ends when it connects,
// whether it was there before or comes during the wait, and reports
// ErrNoAgent when its context ends first.
func TestWaitConnected(t *testing.T) {
	s, _ := serve(t, Config{})
	short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := s.WaitConnected(short); !errors.Is(err, ErrNoAgent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitConnected with no peer = %v, want ErrNoAgent and the deadline", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.WaitConnected(t.Context()) }()
	p := dial(t, s)
	if err := <-waited; err != nil {
		t.Fatalf("WaitConnected across a connection = %v", err)
	}
	if err := s.WaitConnected(t.Context()); err != nil {
		t.Fatalf("WaitConnected while connected = %v", err)
	}
	p.hello() // the connection is served, not only accepted
}
