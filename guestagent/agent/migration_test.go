package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// fakeHost is a host end that can send migration requests: it answers the
// guest's first Hello and hands the tests everything the guest sends.
type fakeHost struct {
	l     net.Listener
	conns chan *fakeConn
	wg    sync.WaitGroup

	mu  sync.Mutex
	all []*fakeConn
}

type fakeConn struct {
	c        net.Conn
	msgs     chan agentmsg.Message
	features atomic.Uint32 // of the latest Hello
	hellos   atomic.Int32
}

func startFakeHost(t *testing.T, path string) *fakeHost {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{l: l, conns: make(chan *fakeConn, 16)}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fc := &fakeConn{c: c, msgs: make(chan agentmsg.Message, 256)}
			h.mu.Lock()
			h.all = append(h.all, fc)
			h.mu.Unlock()
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				fc.read()
			}()
			h.conns <- fc
		}
	}()
	t.Cleanup(func() {
		l.Close()
		h.mu.Lock()
		for _, fc := range h.all {
			fc.c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return h
}

func (fc *fakeConn) read() {
	r := agentmsg.NewReader(fc.c)
	for {
		m, err := r.Read()
		if err != nil {
			return
		}
		if hello, ok := m.(*agentmsg.Hello); ok {
			fc.features.Store(hello.Features)
			if fc.hellos.Add(1) == 1 {
				fc.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Features: agentmsg.FeatureWatch | agentmsg.FeatureMigration, Ident: "fake host"})
			}
		}
		select {
		case fc.msgs <- m:
		default: // the test does not care about this many messages
		}
	}
}

func (fc *fakeConn) send(m agentmsg.Message) { fc.c.Write(agentmsg.Marshal(m)) }

// conn waits for the next guest connection.
func (h *fakeHost) conn(t *testing.T) *fakeConn {
	t.Helper()
	select {
	case fc := <-h.conns:
		return fc
	case <-time.After(time.Minute):
		t.Fatal("no guest connected")
		return nil
	}
}

// expect waits for the next message of type T from the guest.
func expect[T agentmsg.Message](t *testing.T, fc *fakeConn) T {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case m := <-fc.msgs:
			if m, ok := m.(T); ok {
				return m
			}
		case <-timeout:
			var zero T
			t.Fatalf("no %T from the guest", zero)
			return zero
		}
	}
}

// waitHello waits until the guest's latest Hello announces want (or not).
func waitHello(t *testing.T, fc *fakeConn, want bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for (fc.features.Load()&agentmsg.FeatureMigration != 0) != want || fc.hellos.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("guest features %#x, want migration %v", fc.features.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// funcHandler is a MigrationHandler made of functions; nil ones succeed.
type funcHandler struct {
	quiesce func(ctx context.Context) error
	resume  func(ctx context.Context, replugged bool) error
}

func (h funcHandler) Quiesce(ctx context.Context) error {
	if h.quiesce == nil {
		return nil
	}
	return h.quiesce(ctx)
}

func (h funcHandler) Resume(ctx context.Context, replugged bool) error {
	if h.resume == nil {
		return nil
	}
	return h.resume(ctx, replugged)
}

// startClient runs a client with handler h (nil: none); stop ends it
// (also at cleanup).
func startClient(t *testing.T, open func() (io.ReadWriteCloser, error), h MigrationHandler) (c *Client, stop func()) {
	t.Helper()
	c = New(open, Options{Ident: "test", ReopenDelay: time.Millisecond, Logger: quiet})
	if h != nil {
		c.HandleMigration(h)
	}
	return c, runUntilStopped(t, c)
}

// runUntilStopped runs c until stop (also at cleanup); c.Run must end
// with context.Canceled.
func runUntilStopped(t *testing.T, c *Client) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("Run() = %v, want context.Canceled", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestMigrationWithoutHandler(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	startClient(t, dialer(h.l.Addr().String()), nil)
	fc := h.conn(t)
	waitHello(t, fc, false)
	fc.send(&agentmsg.Quiesce{Cookie: 5, DeadlineMs: 1000})
	if q := expect[*agentmsg.Quiesced](t, fc); *q != (agentmsg.Quiesced{Cookie: 5, Status: agentmsg.MigrationOK}) {
		t.Errorf("Quiesced = %+v, want cookie 5, OK, 0 programs", q)
	}
	fc.send(&agentmsg.Resume{Cookie: 6, Flags: agentmsg.ResumeReplugged})
	if r := expect[*agentmsg.Resumed](t, fc); *r != (agentmsg.Resumed{Cookie: 6, Status: agentmsg.MigrationOK}) {
		t.Errorf("Resumed = %+v, want cookie 6, OK, 0 programs", r)
	}
}

func TestMigrationHandler(t *testing.T) {
	errBroken := errors.New("broken")
	tests := []struct {
		name     string
		quiesce  func(ctx context.Context) error
		status   agentmsg.MigrationStatus
		programs uint32
	}{
		{"ok", nil, agentmsg.MigrationOK, 1},
		{"fails", func(context.Context) error { return errBroken }, agentmsg.MigrationFailed, 0},
		{"deadline", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, agentmsg.MigrationTimeout, 0},
		{"device timeout", func(context.Context) error { return driver.ErrTimeout }, agentmsg.MigrationTimeout, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
			var replugged atomic.Int32
			startClient(t, dialer(h.l.Addr().String()), funcHandler{quiesce: tt.quiesce, resume: func(_ context.Context, r bool) error {
				if r {
					replugged.Add(1)
				}
				return nil
			}})
			fc := h.conn(t)
			waitHello(t, fc, true)
			fc.send(&agentmsg.Quiesce{Cookie: 7, DeadlineMs: 20})
			want := agentmsg.Quiesced{Cookie: 7, Status: tt.status, Programs: tt.programs}
			if q := expect[*agentmsg.Quiesced](t, fc); *q != want {
				t.Errorf("Quiesced = %+v, want %+v", *q, want)
			}
			fc.send(&agentmsg.Resume{Cookie: 8, Flags: agentmsg.ResumeReplugged, DeadlineMs: 1000})
			if r := expect[*agentmsg.Resumed](t, fc); *r != (agentmsg.Resumed{Cookie: 8, Status: agentmsg.MigrationOK, Programs: 1}) {
				t.Errorf("Resumed = %+v, want cookie 8, OK, 1 program", *r)
			}
			if replugged.Load() != 1 {
				t.Errorf("handler saw replugged %d times, want 1", replugged.Load())
			}
		})
	}
}

// TestHandleMigrationLate: a handler registered on a connected client is
// announced with a second Hello.
func TestHandleMigrationLate(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	c, _ := startClient(t, dialer(h.l.Addr().String()), nil)
	fc := h.conn(t)
	waitConnected(t, c, 1)
	waitHello(t, fc, false)
	c.HandleMigration(funcHandler{})
	waitHello(t, fc, true)
	fc.send(&agentmsg.Quiesce{Cookie: 1, DeadlineMs: 1000})
	if q := expect[*agentmsg.Quiesced](t, fc); q.Programs != 1 || q.Status != agentmsg.MigrationOK {
		t.Errorf("Quiesced = %+v, want OK, 1 program", *q)
	}
}

// TestMigrationAcrossReconnect: the channel reconnects between Quiesce and
// Resume (the VM moved); the Resume arrives on the new connection.
func TestMigrationAcrossReconnect(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	var quiesced, resumed atomic.Int32
	c, _ := startClient(t, dialer(h.l.Addr().String()), funcHandler{
		quiesce: func(context.Context) error { quiesced.Add(1); return nil },
		resume:  func(context.Context, bool) error { resumed.Add(1); return nil },
	})
	fc := h.conn(t)
	waitHello(t, fc, true)
	fc.send(&agentmsg.Quiesce{Cookie: 1, DeadlineMs: 1000})
	expect[*agentmsg.Quiesced](t, fc)
	fc.c.Close()
	fc2 := h.conn(t)
	waitHello(t, fc2, true)
	waitConnected(t, c, 2)
	fc2.send(&agentmsg.Resume{Cookie: 2, Flags: agentmsg.ResumeReplugged, DeadlineMs: 1000})
	if r := expect[*agentmsg.Resumed](t, fc2); r.Cookie != 2 || r.Status != agentmsg.MigrationOK || r.Programs != 1 {
		t.Errorf("Resumed = %+v", *r)
	}
	if quiesced.Load() != 1 || resumed.Load() != 1 {
		t.Errorf("handler ran quiesce %d, resume %d times; want 1, 1", quiesced.Load(), resumed.Load())
	}
}

// newModel wraps a fake device's registers with another device name.
type newModel struct {
	driver.Registers
	name string
}

func (m newModel) Read32(off uint32) uint32 {
	if off >= abi.RegDeviceName && off < abi.RegDeviceName+abi.DeviceNameLen {
		var b [4]byte
		copy(b[:], m.name[min(int(off-abi.RegDeviceName), len(m.name)):])
		return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	}
	return m.Registers.Read32(off)
}

func TestDriverMigration(t *testing.T) {
	f := drivertest.New(drivertest.Config{}, nil)
	dev, err := driver.Open(f, f, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	b, _ := dev.CreateBuffer(4)
	if err := dev.Write(b, 0, []byte("abcd")); err != nil {
		t.Fatal(err)
	}
	var reopens atomic.Int32
	fail := atomic.Bool{}
	dark := &atomic.Bool{}
	reopen := func(ctx context.Context) (driver.Registers, error) {
		reopens.Add(1)
		if fail.Load() {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		dark.Store(false) // ReopenGuest writes the configuration back
		return newModel{darkable{f, dark}, "after"}, nil
	}
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	startClient(t, dialer(h.l.Addr().String()), DriverMigration(dev, reopen))
	fc := h.conn(t)
	waitHello(t, fc, true)

	// A Resume with nothing suspended does nothing.
	fc.send(&agentmsg.Resume{Cookie: 1, DeadlineMs: 1000})
	if r := expect[*agentmsg.Resumed](t, fc); r.Status != agentmsg.MigrationOK || reopens.Load() != 0 {
		t.Errorf("Resumed = %+v after %d reopens, want OK without reopening", *r, reopens.Load())
	}
	fc.send(&agentmsg.Quiesce{Cookie: 2, DeadlineMs: 1000})
	if q := expect[*agentmsg.Quiesced](t, fc); q.Status != agentmsg.MigrationOK || q.Programs != 1 || !dev.Suspended() {
		t.Fatalf("Quiesced = %+v, device suspended %v", *q, dev.Suspended())
	}
	// The device does not come back in time.
	fail.Store(true)
	fc.send(&agentmsg.Resume{Cookie: 3, Flags: agentmsg.ResumeReplugged, DeadlineMs: 20})
	if r := expect[*agentmsg.Resumed](t, fc); r.Status != agentmsg.MigrationTimeout || !dev.Suspended() {
		t.Errorf("Resumed = %+v, suspended %v; want Timeout and still suspended", *r, dev.Suspended())
	}
	fail.Store(false)
	fc.send(&agentmsg.Resume{Cookie: 4, Flags: agentmsg.ResumeReplugged, DeadlineMs: 1000})
	if r := expect[*agentmsg.Resumed](t, fc); r.Status != agentmsg.MigrationOK || r.Programs != 1 || dev.Suspended() {
		t.Fatalf("Resumed = %+v, suspended %v", *r, dev.Suspended())
	}
	got := make([]byte, 4)
	if err := dev.Read(b, 0, got); err != nil || string(got) != "abcd" || dev.Info().Name != "after" {
		t.Errorf("after migration: Read = %q, %v; device %q", got, err, dev.Info().Name)
	}

	// In place, BAR0 kept mapped and answering at Resume: no reopen.
	regs := dev.Regs()
	n := reopens.Load()
	fc.send(&agentmsg.Quiesce{Cookie: 5, DeadlineMs: 1000, Flags: agentmsg.QuiesceInPlace})
	if q := expect[*agentmsg.Quiesced](t, fc); q.Status != agentmsg.MigrationOK || !dev.Suspended() {
		t.Fatalf("Quiesced = %+v, suspended %v", *q, dev.Suspended())
	}
	fc.send(&agentmsg.Resume{Cookie: 6, Flags: agentmsg.ResumeReplugged, DeadlineMs: 1000})
	if r := expect[*agentmsg.Resumed](t, fc); r.Status != agentmsg.MigrationOK || dev.Suspended() {
		t.Fatalf("Resumed = %+v, suspended %v", *r, dev.Suspended())
	}
	if reopens.Load() != n || dev.Regs() != regs {
		t.Errorf("in-place resume reopened the device (%d reopens, same registers %v)", reopens.Load()-n, dev.Regs() == regs)
	}
	// In place, but BAR0 dark at Resume (nobody restored the
	// configuration): the program reopens the device.
	fc.send(&agentmsg.Quiesce{Cookie: 7, DeadlineMs: 1000, Flags: agentmsg.QuiesceInPlace})
	expect[*agentmsg.Quiesced](t, fc)
	dark.Store(true)
	fc.send(&agentmsg.Resume{Cookie: 8, Flags: agentmsg.ResumeReplugged, DeadlineMs: 1000})
	if r := expect[*agentmsg.Resumed](t, fc); r.Status != agentmsg.MigrationOK || dev.Suspended() {
		t.Fatalf("Resumed over a dark BAR0 = %+v, suspended %v", *r, dev.Suspended())
	}
	if reopens.Load() != n+1 {
		t.Errorf("resume over a dark BAR0: %d reopens, want 1", reopens.Load()-n)
	}
}

// darkable passes registers through unless dark (a BAR the VMM does not
// decode: reads return all ones).
type darkable struct {
	driver.Registers
	dark *atomic.Bool
}

func (d darkable) Read32(off uint32) uint32 {
	if d.dark.Load() {
		return 0xffffffff
	}
	return d.Registers.Read32(off)
}

// relaySetup is a fake host, vgpu-agent's client and relay, and n relay
// clients with the given handlers.
type relaySetup struct {
	host  *fakeHost
	up    *fakeConn
	relay *Relay
	stops []func()
}

func startRelaySetup(t *testing.T, handlers ...MigrationHandler) *relaySetup {
	t.Helper()
	dir := t.TempDir()
	h := startFakeHost(t, filepath.Join(dir, "host.sock"))
	up, _ := startClient(t, dialer(h.l.Addr().String()), nil)
	r := serveRelay(t, up, filepath.Join(dir, "relay.sock"))
	s := &relaySetup{host: h, up: h.conn(t), relay: r}
	waitHello(t, s.up, true)
	for _, hd := range handlers {
		_, stop := startClient(t, DialRelay(filepath.Join(dir, "relay.sock")), hd)
		s.stops = append(s.stops, stop)
	}
	deadline := time.Now().Add(time.Minute)
	for r.migrationClients() != len(handlers) {
		if time.Now().After(deadline) {
			t.Fatalf("relay has %d migration clients, want %d", r.migrationClients(), len(handlers))
		}
		time.Sleep(time.Millisecond)
	}
	return s
}

func (s *relaySetup) quiesce(t *testing.T, cookie uint64, deadline time.Duration) agentmsg.Quiesced {
	t.Helper()
	s.up.send(&agentmsg.Quiesce{Cookie: cookie, DeadlineMs: uint32(deadline.Milliseconds())})
	q := expect[*agentmsg.Quiesced](t, s.up)
	if q.Cookie != cookie {
		t.Errorf("Quiesced cookie %d, want %d", q.Cookie, cookie)
	}
	return *q
}

func TestRelayMigrationAllOK(t *testing.T) {
	var replugged atomic.Int32
	resume := func(_ context.Context, r bool) error {
		if r {
			replugged.Add(1)
		}
		return nil
	}
	s := startRelaySetup(t, funcHandler{resume: resume}, funcHandler{resume: resume})
	if q := s.quiesce(t, 11, time.Minute); q.Status != agentmsg.MigrationOK || q.Programs != 2 {
		t.Errorf("Quiesced = %+v, want OK, 2 programs", q)
	}
	s.up.send(&agentmsg.Resume{Cookie: 12, Flags: agentmsg.ResumeReplugged, DeadlineMs: 60_000})
	if r := expect[*agentmsg.Resumed](t, s.up); *r != (agentmsg.Resumed{Cookie: 12, Status: agentmsg.MigrationOK, Programs: 2}) {
		t.Errorf("Resumed = %+v, want cookie 12, OK, 2 programs", *r)
	}
	if replugged.Load() != 2 {
		t.Errorf("%d handlers saw replugged, want 2", replugged.Load())
	}
}

// TestRelayMigrationNoClients: programs that did not register a handler
// are not asked; the host sees programs 0.
func TestRelayMigrationNoClients(t *testing.T) {
	s := startRelaySetup(t)
	startClient(t, DialRelay(s.relay.l.Addr().String()), nil)
	if q := s.quiesce(t, 1, time.Minute); q.Status != agentmsg.MigrationOK || q.Programs != 0 {
		t.Errorf("Quiesced = %+v, want OK, 0 programs", q)
	}
}

// TestRelayMigrationSlow: a client that answers after the deadline makes
// the answer Timeout; its late answer is ignored and the next request
// works.
func TestRelayMigrationSlow(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	slow := funcHandler{quiesce: func(context.Context) error {
		if calls.Add(1) == 1 {
			<-release // ignores its deadline
		}
		return nil
	}}
	s := startRelaySetup(t, funcHandler{}, slow)
	start := time.Now()
	if q := s.quiesce(t, 21, 200*time.Millisecond); q.Status != agentmsg.MigrationTimeout || q.Programs != 1 {
		t.Errorf("Quiesced = %+v, want Timeout, 1 program", q)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("relay answered after %v", el)
	}
	close(release) // the late Quiesced (old cookie) reaches the relay
	if q := s.quiesce(t, 22, time.Minute); q.Status != agentmsg.MigrationOK || q.Programs != 2 {
		t.Errorf("second Quiesced = %+v, want OK, 2 programs", q)
	}
}

func TestRelayMigrationFailed(t *testing.T) {
	s := startRelaySetup(t, funcHandler{}, funcHandler{quiesce: func(context.Context) error { return errors.New("no") }})
	if q := s.quiesce(t, 31, time.Minute); q.Status != agentmsg.MigrationFailed || q.Programs != 1 {
		t.Errorf("Quiesced = %+v, want Failed, 1 program", q)
	}
}

// TestRelayMigrationDisconnect: a client that goes away in the middle of a
// Quiesce does not hold the relay until the deadline.
func TestRelayMigrationDisconnect(t *testing.T) {
	entered := make(chan struct{})
	var once sync.Once
	stuck := funcHandler{quiesce: func(ctx context.Context) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return ctx.Err()
	}}
	s := startRelaySetup(t, funcHandler{}, stuck)
	s.up.send(&agentmsg.Quiesce{Cookie: 41, DeadlineMs: 10 * 60_000})
	<-entered
	start := time.Now()
	s.stops[1]() // the program exits mid-quiesce
	q := expect[*agentmsg.Quiesced](t, s.up)
	if q.Cookie != 41 || q.Status != agentmsg.MigrationFailed || q.Programs != 1 {
		t.Errorf("Quiesced = %+v, want cookie 41, Failed, 1 program", *q)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("relay answered %v after the client went away", el)
	}
	// The relay still serves the remaining client, once it has seen the
	// other one go (a client that leaves during a request counts as
	// failed: nobody can say it quiesced).
	for deadline := time.Now().Add(time.Minute); s.relay.migrationClients() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay still counts %d migration clients", s.relay.migrationClients())
		}
	}
	if q := s.quiesce(t, 42, time.Minute); q.Status != agentmsg.MigrationOK || q.Programs != 1 {
		t.Errorf("next Quiesced = %+v, want OK, 1 program", q)
	}
}

// lostRecorder records which of its methods was called.
type lostRecorder struct{ calls []string }

func (r *lostRecorder) Quiesce(context.Context) error {
	r.calls = append(r.calls, "quiesce")
	return nil
}
func (r *lostRecorder) Resume(_ context.Context, replugged bool) error {
	r.calls = append(r.calls, fmt.Sprint("resume ", replugged))
	return nil
}

type lostHandler struct{ *lostRecorder }

func (l lostHandler) Lost(context.Context) error { l.calls = append(l.calls, "lost"); return nil }

// TestResumeLostDispatch: a Resume that says the state was lost goes to
// a LostHandler's Lost, and to a plain handler's Resume(replugged) as
// before; an ordinary Resume never reaches Lost.
func TestResumeLostDispatch(t *testing.T) {
	lost := &agentmsg.Resume{Cookie: 1, Flags: agentmsg.ResumeReplugged | agentmsg.ResumeLost}
	plain := &agentmsg.Resume{Cookie: 2, Flags: agentmsg.ResumeReplugged}
	lr := &lostRecorder{}
	hm := handlerMigrator{lostHandler{lr}}
	for _, req := range []agentmsg.Message{lost, plain} {
		if st, n := hm.migrate(context.Background(), req); st != agentmsg.MigrationOK || n != 1 {
			t.Fatalf("migrate(%+v) = %v, %d", req, st, n)
		}
	}
	pr := &lostRecorder{}
	if st, _ := (handlerMigrator{pr}).migrate(context.Background(), lost); st != agentmsg.MigrationOK {
		t.Fatalf("plain handler: %v", st)
	}
	if got := fmt.Sprint(lr.calls, pr.calls); got != "[lost resume true] [resume true]" {
		t.Errorf("calls %s, want [lost resume true] [resume true]", got)
	}
}

// oldClient is a relay client of an earlier release: it announces
// migration but not FeatureInPlace, answers every Quiesce and Resume OK
// and records the Quiesce flags it was sent.
type oldClient struct {
	mu     sync.Mutex
	flags  []uint32
	resume int
}

func startOldClient(t *testing.T, path string) *oldClient {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write(agentmsg.Marshal(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Features: agentmsg.FeatureMigration, Ident: "old"}))
	o := &oldClient{}
	go func() {
		rd := agentmsg.NewReader(c)
		for {
			m, err := rd.Read()
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *agentmsg.Quiesce:
				o.mu.Lock()
				o.flags = append(o.flags, m.Flags)
				o.mu.Unlock()
				c.Write(agentmsg.Marshal(&agentmsg.Quiesced{Cookie: m.Cookie, Status: agentmsg.MigrationOK, Programs: 1}))
			case *agentmsg.Resume:
				o.mu.Lock()
				o.resume++
				o.mu.Unlock()
				c.Write(agentmsg.Marshal(&agentmsg.Resumed{Cookie: m.Cookie, Status: agentmsg.MigrationOK, Programs: 1}))
			}
		}
	}()
	return o
}

// eventRestorer records its Restore.
type eventRestorer func(string)

func (e eventRestorer) Restore() (bool, error) { e("restore"); return true, nil }
func (e eventRestorer) Close() error           { e("close"); return nil }

// TestRelayInPlace: a Quiesce with QuiesceInPlace reaches the programs
// that announced FeatureInPlace with the flag (their handlers see
// InPlace) and programs of an earlier release without it; the relay saves
// the vGPU's PCI configuration at the Quiesce and writes it back at the
// Resume before any program is told, and does not after a Quiesce
// without the flag or with a Resume that says the state was lost.
func TestRelayInPlace(t *testing.T) {
	var mu sync.Mutex
	var events []string
	event := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	h := funcHandler{
		quiesce: func(ctx context.Context) error { event(fmt.Sprint("quiesce in place=", InPlace(ctx))); return nil },
		resume:  func(context.Context, bool) error { event("resume"); return nil },
	}
	s := startRelaySetup(t, h)
	old := startOldClient(t, s.relay.l.Addr().String())
	for deadline := time.Now().Add(time.Minute); s.relay.migrationClients() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("relay has %d migration clients, want 2", s.relay.migrationClients())
		}
	}
	s.relay.mu.Lock()
	s.relay.saveConfig = func(string) (configRestorer, string, error) {
		event("save")
		return eventRestorer(event), "/sys/bus/pci/devices/0000:00:04.0", nil
	}
	s.relay.mu.Unlock()

	for i, c := range []struct {
		quiesce, resume uint32
		want            []string
	}{
		{agentmsg.QuiesceInPlace, agentmsg.ResumeReplugged,
			[]string{"quiesce in place=true", "restore", "resume"}},
		{0, agentmsg.ResumeReplugged, []string{"quiesce in place=false", "resume"}},
		{agentmsg.QuiesceInPlace, agentmsg.ResumeReplugged | agentmsg.ResumeLost, []string{"quiesce in place=true", "resume"}},
	} {
		mu.Lock()
		events = nil
		mu.Unlock()
		cookie := uint64(10 * (i + 1))
		s.up.send(&agentmsg.Quiesce{Cookie: cookie, DeadlineMs: 60_000, Flags: c.quiesce})
		if q := expect[*agentmsg.Quiesced](t, s.up); q.Status != agentmsg.MigrationOK || q.Programs != 2 {
			t.Errorf("case %d: Quiesced = %+v, want OK, 2 programs", i, *q)
		}
		s.up.send(&agentmsg.Resume{Cookie: cookie + 1, DeadlineMs: 60_000, Flags: c.resume})
		if r := expect[*agentmsg.Resumed](t, s.up); r.Status != agentmsg.MigrationOK || r.Programs != 2 {
			t.Errorf("case %d: Resumed = %+v, want OK, 2 programs", i, *r)
		}
		// The save runs beside the programs' quiesce, and always before
		// the restore (which waits for it).
		mu.Lock()
		all := events
		mu.Unlock()
		var got []string
		saves := 0
		for _, e := range all {
			switch e {
			case "save":
				saves++
				continue
			case "close": // asynchronous: counted at the end
				continue
			}
			got = append(got, e)
		}
		inPlace := c.quiesce&agentmsg.QuiesceInPlace != 0
		if fmt.Sprint(got) != fmt.Sprint(c.want) || (saves == 1) != inPlace || saves > 1 {
			t.Errorf("case %d: events %q, want %q with one save only in place", i, all, c.want)
		}
	}
	// The configuration saved for the Resume that said the state was lost
	// was closed, not restored, and no other was (Close waits for it).
	s.relay.Close()
	mu.Lock()
	closes := 0
	for _, e := range events {
		if e == "close" {
			closes++
		}
	}
	mu.Unlock()
	if closes != 1 {
		t.Errorf("%d saved configurations closed unrestored, want 1 (events of the last case: %q)", closes, events)
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	if fmt.Sprint(old.flags) != "[0 0 0]" || old.resume != 3 {
		t.Errorf("the client of an earlier release got Quiesce flags %v and %d Resumes; want no flags, 3", old.flags, old.resume)
	}
}
