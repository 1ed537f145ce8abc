package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// callLog records handler calls, in order, from any goroutine.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
}

// take returns the calls so far and forgets them.
func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

// recHandler is a ReconfigHandler that logs its calls as "<name> <call>";
// its functions, when set, give the results (nil ones succeed).
type recHandler struct {
	log         *callLog
	name        string
	checkpoint  func(ctx context.Context, to agentmsg.Limits) error
	cleanup     func(ctx context.Context) error
	reconfigure func(ctx context.Context, now agentmsg.Limits) error
}

func limitsString(l agentmsg.Limits) string {
	return fmt.Sprintf("mem=%d cus=%d %s/%s", l.MemBytes, l.ComputeUnits, l.Device, l.Profile)
}

func (h *recHandler) Checkpoint(ctx context.Context, to agentmsg.Limits) error {
	h.log.add("%s checkpoint %s", h.name, limitsString(to))
	if h.checkpoint == nil {
		return nil
	}
	return h.checkpoint(ctx, to)
}

func (h *recHandler) Cleanup(ctx context.Context) error {
	h.log.add("%s cleanup", h.name)
	if h.cleanup == nil {
		return nil
	}
	return h.cleanup(ctx)
}

func (h *recHandler) Reconfigure(ctx context.Context, now agentmsg.Limits) error {
	h.log.add("%s reconfigure %s", h.name, limitsString(now))
	if h.reconfigure == nil {
		return nil
	}
	return h.reconfigure(ctx, now)
}

func (h *recHandler) Resume(context.Context) error {
	h.log.add("%s resume", h.name)
	return nil
}

// startReconfigClient runs a client that registered h for reconfiguration
// with r before it started; stop ends it (also at cleanup).
func startReconfigClient(t *testing.T, open func() (io.ReadWriteCloser, error), r Resources, h ReconfigHandler) (*Client, func()) {
	t.Helper()
	c := New(open, Options{Ident: "test", ReopenDelay: time.Millisecond, Logger: quiet})
	c.HandleReconfig(r, h)
	return c, runUntilStopped(t, c)
}

// next returns the next message the guest sent.
func next(t *testing.T, fc *fakeConn) agentmsg.Message {
	t.Helper()
	select {
	case m := <-fc.msgs:
		return m
	case <-time.After(time.Minute):
		t.Fatal("the guest sent nothing")
		return nil
	}
}

// waitDecls waits for a Resources message from the guest whose
// declarations have the given names, in that order, and returns them.
func waitDecls(t *testing.T, fc *fakeConn, names ...string) []agentmsg.Declaration {
	t.Helper()
	var last []string
	timeout := time.After(time.Minute)
	for {
		select {
		case m := <-fc.msgs:
			r, ok := m.(*agentmsg.Resources)
			if !ok {
				continue
			}
			last = last[:0]
			for _, d := range r.Decls {
				last = append(last, d.Name)
			}
			if fmt.Sprint(last) == fmt.Sprint(names) {
				return r.Decls
			}
		case <-timeout:
			t.Fatalf("no Resources declaring %q (last declared %q)", names, last)
			return nil
		}
	}
}

var (
	oldLimits = agentmsg.Limits{MemBytes: 1 << 30, ComputeUnits: 8, Device: "old gpu", Profile: "vgpu-1g"}
	newLimits = agentmsg.Limits{MemBytes: 256 << 20, ComputeUnits: 2, Device: "new gpu", Profile: "vgpu-256m"}
)

// TestReconfigHandler: a client announces FeatureReconfig, declares its
// needs after its Hello, and runs R.1-R.4 in order with the limits of the
// requests.
func TestReconfigHandler(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	log := &callLog{}
	startReconfigClient(t, dialer(h.l.Addr().String()), Resources{MinMem: 1 << 20, PrefMem: 4 << 20, MinCUs: 1, Name: "prog"},
		&recHandler{log: log, name: "p"})
	fc := h.conn(t)
	if hello, ok := next(t, fc).(*agentmsg.Hello); !ok || hello.Features&agentmsg.FeatureReconfig == 0 {
		t.Fatalf("first message %+v, want Hello with FeatureReconfig", hello)
	}
	res, ok := next(t, fc).(*agentmsg.Resources)
	want := []agentmsg.Declaration{{PID: uint32(os.Getpid()), MinCUs: 1, PrefCUs: 1, MinMem: 1 << 20, PrefMem: 4 << 20, Name: "prog"}}
	if !ok || !cmp.Equal(res.Decls, want) {
		t.Fatalf("after Hello: %+v, want Resources %+v", res, want)
	}

	fc.send(&agentmsg.Checkpoint{Cookie: 1, DeadlineMs: 60_000, To: newLimits})
	if got := expect[*agentmsg.Checkpointed](t, fc); *got != (agentmsg.Checkpointed{Cookie: 1, Status: agentmsg.MigrationOK, Programs: 1}) {
		t.Errorf("Checkpointed = %+v, want cookie 1, OK, 1 program", *got)
	}
	fc.send(&agentmsg.Reconfigure{Cookie: 2, DeadlineMs: 60_000, Now: newLimits})
	if got := expect[*agentmsg.Reconfigured](t, fc); *got != (agentmsg.Reconfigured{Cookie: 2, Status: agentmsg.MigrationOK, Programs: 1}) {
		t.Errorf("Reconfigured = %+v, want cookie 2, OK, 1 program", *got)
	}
	wantCalls := []string{"p checkpoint " + limitsString(newLimits), "p cleanup", "p reconfigure " + limitsString(newLimits), "p resume"}
	if diff := cmp.Diff(wantCalls, log.take()); diff != "" {
		t.Errorf("handler calls (-want +got):\n%s", diff)
	}
}

func TestReconfigWithoutHandler(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	startClient(t, dialer(h.l.Addr().String()), nil)
	fc := h.conn(t)
	if hello, ok := next(t, fc).(*agentmsg.Hello); !ok || hello.Features&agentmsg.FeatureReconfig != 0 {
		t.Fatalf("first message %+v, want Hello without FeatureReconfig", hello)
	}
	if res, ok := next(t, fc).(*agentmsg.Resources); !ok || len(res.Decls) != 0 {
		t.Fatalf("after Hello: %+v, want an empty Resources", res)
	}
	fc.send(&agentmsg.Checkpoint{Cookie: 3, To: newLimits})
	if got := expect[*agentmsg.Checkpointed](t, fc); *got != (agentmsg.Checkpointed{Cookie: 3, Status: agentmsg.MigrationOK}) {
		t.Errorf("Checkpointed = %+v, want cookie 3, OK, 0 programs", *got)
	}
	fc.send(&agentmsg.Reconfigure{Cookie: 4, Now: newLimits})
	if got := expect[*agentmsg.Reconfigured](t, fc); *got != (agentmsg.Reconfigured{Cookie: 4, Status: agentmsg.MigrationOK}) {
		t.Errorf("Reconfigured = %+v, want cookie 4, OK, 0 programs", *got)
	}
}

// minimum refuses limits of less than min bytes, as a program whose
// declared minimum is min does.
func minimum(min uint64) func(context.Context, agentmsg.Limits) error {
	return func(_ context.Context, to agentmsg.Limits) error {
		if to.MemBytes < min {
			return fmt.Errorf("need %d bytes, offered %d: %w", min, to.MemBytes, ErrRefused)
		}
		return nil
	}
}

// TestReconfigOutcomes: a refusal skips Cleanup and is answered Refused;
// the host's abort then reaches Reconfigure with the old limits and
// Resume. Failures and timeouts are answered as for migration, and Resume
// follows a failed Reconfigure.
func TestReconfigOutcomes(t *testing.T) {
	errBroken := errors.New("broken")
	tests := []struct {
		name        string
		h           recHandler
		checkpoint  agentmsg.MigrationStatus
		calls       []string // during the Checkpoint
		reconfigure agentmsg.MigrationStatus
	}{
		{"refused", recHandler{checkpoint: minimum(512 << 20)}, agentmsg.ReconfigRefused,
			[]string{"p checkpoint " + limitsString(newLimits)}, agentmsg.MigrationOK},
		{"checkpoint fails", recHandler{checkpoint: func(context.Context, agentmsg.Limits) error { return errBroken }},
			agentmsg.MigrationFailed, []string{"p checkpoint " + limitsString(newLimits)}, agentmsg.MigrationOK},
		{"checkpoint deadline", recHandler{checkpoint: func(ctx context.Context, _ agentmsg.Limits) error { <-ctx.Done(); return ctx.Err() }},
			agentmsg.MigrationTimeout, []string{"p checkpoint " + limitsString(newLimits)}, agentmsg.MigrationOK},
		{"cleanup deadline", recHandler{cleanup: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
			agentmsg.MigrationTimeout, []string{"p checkpoint " + limitsString(newLimits), "p cleanup"}, agentmsg.MigrationOK},
		{"reconfigure fails", recHandler{reconfigure: func(context.Context, agentmsg.Limits) error { return errBroken }},
			agentmsg.MigrationOK, []string{"p checkpoint " + limitsString(newLimits), "p cleanup"}, agentmsg.MigrationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
			log := &callLog{}
			hd := tt.h
			hd.log, hd.name = log, "p"
			startReconfigClient(t, dialer(h.l.Addr().String()), Resources{MinMem: 512 << 20, Name: "prog"}, &hd)
			fc := h.conn(t)
			fc.send(&agentmsg.Checkpoint{Cookie: 7, DeadlineMs: 20, To: newLimits})
			if got := expect[*agentmsg.Checkpointed](t, fc); got.Cookie != 7 || got.Status != tt.checkpoint {
				t.Errorf("Checkpointed = %+v, want cookie 7, %v", *got, tt.checkpoint)
			}
			if diff := cmp.Diff(tt.calls, log.take()); diff != "" {
				t.Errorf("calls during the Checkpoint (-want +got):\n%s", diff)
			}
			fc.send(&agentmsg.Reconfigure{Cookie: 8, Flags: agentmsg.ReconfigureAborted, DeadlineMs: 60_000, Now: oldLimits})
			if got := expect[*agentmsg.Reconfigured](t, fc); got.Cookie != 8 || got.Status != tt.reconfigure {
				t.Errorf("Reconfigured = %+v, want cookie 8, %v", *got, tt.reconfigure)
			}
			if diff := cmp.Diff([]string{"p reconfigure " + limitsString(oldLimits), "p resume"}, log.take()); diff != "" {
				t.Errorf("calls during the Reconfigure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandleReconfigLate: a handler registered on a connected client is
// announced with a second Hello and its declaration; registering again
// sends the new declaration alone; withdrawing sends Hello without the
// feature and an empty declaration. A bad preferred amount is sent as the
// minimum (the peer would take it for a malformed frame).
func TestHandleReconfigLate(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	c, _ := startClient(t, dialer(h.l.Addr().String()), nil)
	fc := h.conn(t)
	waitDecls(t, fc)
	waitConnected(t, c, 1)
	hd := &recHandler{log: &callLog{}, name: "p"}

	c.HandleReconfig(Resources{MinMem: 10, PrefMem: 20, Name: "first"}, hd)
	if hello, ok := next(t, fc).(*agentmsg.Hello); !ok || hello.Features&agentmsg.FeatureReconfig == 0 {
		t.Fatalf("after HandleReconfig: %+v, want Hello with FeatureReconfig", hello)
	}
	if d := waitDecls(t, fc, "first"); d[0].MinMem != 10 || d[0].PrefMem != 20 {
		t.Errorf("declared %+v", d[0])
	}
	c.HandleReconfig(Resources{MinMem: 30, PrefMem: 5, MinCUs: 4, PrefCUs: 2, Name: "second"}, hd)
	if res, ok := next(t, fc).(*agentmsg.Resources); !ok || len(res.Decls) != 1 || res.Decls[0].Name != "second" {
		t.Fatalf("after a second HandleReconfig: %+v, want Resources alone", res)
	} else if d := res.Decls[0]; d.PrefMem != 30 || d.PrefCUs != 4 {
		t.Errorf("declared %+v, want the preferred amounts raised to the minimums", d)
	}
	c.HandleReconfig(Resources{}, nil)
	if hello, ok := next(t, fc).(*agentmsg.Hello); !ok || hello.Features&agentmsg.FeatureReconfig != 0 {
		t.Fatalf("after withdrawing: %+v, want Hello without FeatureReconfig", hello)
	}
	waitDecls(t, fc)
	fc.send(&agentmsg.Checkpoint{Cookie: 1, DeadlineMs: 60_000, To: newLimits})
	if got := expect[*agentmsg.Checkpointed](t, fc); got.Status != agentmsg.MigrationOK || got.Programs != 0 {
		t.Errorf("Checkpointed after withdrawing = %+v, want OK, 0 programs", *got)
	}
}

// TestReconfigSharesMigrationQueue: a Checkpoint that arrives while a
// Quiesce is in progress waits for it: the two never interleave.
func TestReconfigSharesMigrationQueue(t *testing.T) {
	h := startFakeHost(t, filepath.Join(t.TempDir(), "host.sock"))
	log := &callLog{}
	entered, release := make(chan struct{}), make(chan struct{})
	c, _ := startClient(t, dialer(h.l.Addr().String()), funcHandler{quiesce: func(context.Context) error {
		log.add("quiesce start")
		close(entered)
		<-release
		log.add("quiesce end")
		return nil
	}})
	c.HandleReconfig(Resources{Name: "prog"}, &recHandler{log: log, name: "p"})
	fc := h.conn(t)
	waitDecls(t, fc, "prog")
	fc.send(&agentmsg.Quiesce{Cookie: 1, DeadlineMs: 60_000})
	<-entered
	changed := c.Changed()
	fc.send(&agentmsg.Checkpoint{Cookie: 2, DeadlineMs: 60_000, To: newLimits})
	<-changed // the client has read the Checkpoint and queued it
	close(release)
	if q := expect[*agentmsg.Quiesced](t, fc); q.Cookie != 1 || q.Status != agentmsg.MigrationOK {
		t.Errorf("Quiesced = %+v", *q)
	}
	if cp := expect[*agentmsg.Checkpointed](t, fc); cp.Cookie != 2 || cp.Status != agentmsg.MigrationOK {
		t.Errorf("Checkpointed = %+v", *cp)
	}
	want := []string{"quiesce start", "quiesce end", "p checkpoint " + limitsString(newLimits), "p cleanup"}
	if diff := cmp.Diff(want, log.take()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// reconfigRelay is a fake host, vgpu-agent's client and relay; programs
// connect to the relay with add.
type reconfigRelay struct {
	up    *fakeConn
	relay *Relay
	path  string
	log   *callLog
}

func startReconfigRelay(t *testing.T) *reconfigRelay {
	t.Helper()
	dir := t.TempDir()
	h := startFakeHost(t, filepath.Join(dir, "host.sock"))
	up, _ := startClient(t, dialer(h.l.Addr().String()), nil)
	path := filepath.Join(dir, "relay.sock")
	r := serveRelay(t, up, path)
	return &reconfigRelay{up: h.conn(t), relay: r, path: path, log: &callLog{}}
}

// add connects a program called name with handler h (its log and name
// set here) and waits until the host is told the declarations names.
func (s *reconfigRelay) add(t *testing.T, name string, h *recHandler, names ...string) (stop func()) {
	t.Helper()
	h.log, h.name = s.log, name
	_, stop = startReconfigClient(t, DialRelay(s.path), Resources{MinMem: 1 << 20, Name: name}, h)
	waitDecls(t, s.up, names...)
	return stop
}

func (s *reconfigRelay) checkpoint(t *testing.T, cookie uint64, to agentmsg.Limits) agentmsg.Checkpointed {
	t.Helper()
	s.up.send(&agentmsg.Checkpoint{Cookie: cookie, DeadlineMs: 60_000, To: to})
	cp := expect[*agentmsg.Checkpointed](t, s.up)
	if cp.Cookie != cookie {
		t.Errorf("Checkpointed cookie %d, want %d", cp.Cookie, cookie)
	}
	return *cp
}

// TestRelayReconfig: the relay tells the host the union of its programs'
// declarations, announces FeatureReconfig while it has such programs,
// forwards Checkpoint and Reconfigure with their limits to each and
// answers once.
func TestRelayReconfig(t *testing.T) {
	s := startReconfigRelay(t)
	waitDecls(t, s.up)
	if f := s.up.features.Load(); f&agentmsg.FeatureReconfig != 0 {
		t.Errorf("relay's Hello announces FeatureReconfig (%#x) with no program", f)
	}
	// A program that does not register is not asked, nor declared.
	startClient(t, DialRelay(s.path), nil)
	s.add(t, "a", &recHandler{}, "a")
	if f := s.up.features.Load(); f&agentmsg.FeatureReconfig == 0 {
		t.Errorf("relay's Hello lacks FeatureReconfig (%#x) with a program", f)
	}
	s.add(t, "b", &recHandler{}, "a", "b")
	if cp := s.checkpoint(t, 5, newLimits); cp.Status != agentmsg.MigrationOK || cp.Programs != 2 {
		t.Errorf("Checkpointed = %+v, want OK, 2 programs", cp)
	}
	s.up.send(&agentmsg.Reconfigure{Cookie: 6, Flags: agentmsg.ReconfigureAborted, DeadlineMs: 60_000, Now: oldLimits})
	if r := expect[*agentmsg.Reconfigured](t, s.up); *r != (agentmsg.Reconfigured{Cookie: 6, Status: agentmsg.MigrationOK, Programs: 2}) {
		t.Errorf("Reconfigured = %+v, want cookie 6, OK, 2 programs", *r)
	}
	calls := s.log.take()
	for _, p := range []string{"a", "b"} {
		var got []string
		for _, c := range calls {
			if rest, ok := strings.CutPrefix(c, p+" "); ok {
				got = append(got, rest)
			}
		}
		want := []string{"checkpoint " + limitsString(newLimits), "cleanup", "reconfigure " + limitsString(oldLimits), "resume"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("program %s's calls (-want +got):\n%s", p, diff)
		}
	}
}

// TestRelayReconfigRefused: one program's refusal makes the answer
// Refused; the others' checkpoints still count.
func TestRelayReconfigRefused(t *testing.T) {
	s := startReconfigRelay(t)
	s.add(t, "a", &recHandler{}, "a")
	s.add(t, "b", &recHandler{checkpoint: minimum(512 << 20)}, "a", "b")
	if cp := s.checkpoint(t, 1, newLimits); cp.Status != agentmsg.ReconfigRefused || cp.Programs != 1 {
		t.Errorf("Checkpointed = %+v, want Refused, 1 program", cp)
	}
	if cp := s.checkpoint(t, 2, oldLimits); cp.Status != agentmsg.MigrationOK || cp.Programs != 2 {
		t.Errorf("Checkpointed for limits both accept = %+v, want OK, 2 programs", cp)
	}
}

// TestRelayReconfigDisconnect: a program that goes away in the middle of a
// Checkpoint makes the answer Failed at once, and the host is told the
// declarations without it.
func TestRelayReconfigDisconnect(t *testing.T) {
	s := startReconfigRelay(t)
	entered := make(chan struct{})
	var once sync.Once
	s.add(t, "a", &recHandler{}, "a")
	stop := s.add(t, "b", &recHandler{checkpoint: func(ctx context.Context, _ agentmsg.Limits) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return ctx.Err()
	}}, "a", "b")
	s.up.send(&agentmsg.Checkpoint{Cookie: 9, DeadlineMs: 10 * 60_000, To: newLimits})
	<-entered
	stop()
	// The answer and the new declarations, in either order.
	var cp *agentmsg.Checkpointed
	var decls []string
	for cp == nil || fmt.Sprint(decls) != "[a]" {
		switch m := next(t, s.up).(type) {
		case *agentmsg.Checkpointed:
			cp = m
		case *agentmsg.Resources:
			decls = decls[:0]
			for _, d := range m.Decls {
				decls = append(decls, d.Name)
			}
		}
	}
	if *cp != (agentmsg.Checkpointed{Cookie: 9, Status: agentmsg.MigrationFailed, Programs: 1}) {
		t.Errorf("Checkpointed = %+v, want cookie 9, Failed, 1 program", *cp)
	}
	if cp := s.checkpoint(t, 10, newLimits); cp.Status != agentmsg.MigrationOK || cp.Programs != 1 {
		t.Errorf("next Checkpointed = %+v, want OK, 1 program", cp)
	}
}

// TestRelayResourcesPID: the relay stamps a program's declarations with
// its PID from SO_PEERCRED, whatever the program said; a program that
// withdraws leaves the union, and the relay stops announcing the feature
// when none is left.
func TestRelayResourcesPID(t *testing.T) {
	s := startReconfigRelay(t)
	c, err := net.Dial("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(agentmsg.Marshal(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Features: agentmsg.FeatureReconfig, Ident: "raw"}))
	c.Write(agentmsg.Marshal(&agentmsg.Resources{Decls: []agentmsg.Declaration{
		{PID: 12345, MinMem: 1, Name: "liar"}, {PID: 1, MinCUs: 2, Name: "twin"}}}))
	d := waitDecls(t, s.up, "liar", "twin")
	if pid := uint32(os.Getpid()); d[0].PID != pid || d[1].PID != pid {
		t.Errorf("declared PIDs %d, %d; want ours, %d", d[0].PID, d[1].PID, pid)
	}
	if f := s.up.features.Load(); f&agentmsg.FeatureReconfig == 0 {
		t.Errorf("relay's Hello lacks FeatureReconfig (%#x)", f)
	}
	c.Write(agentmsg.Marshal(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Ident: "raw"}))
	c.Write(agentmsg.Marshal(&agentmsg.Resources{}))
	waitDecls(t, s.up)
	if f := s.up.features.Load(); f&agentmsg.FeatureReconfig != 0 {
		t.Errorf("relay's Hello announces FeatureReconfig (%#x) after the program withdrew", f)
	}
	if n := s.relay.reconfigClients(); n != 0 {
		t.Errorf("relay counts %d reconfiguration clients, want 0", n)
	}
}
