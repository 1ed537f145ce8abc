package agentchan

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// nextReconfigAsk returns the next Checkpoint or Reconfigure the host
// sends.
func (p *peer) nextReconfigAsk() agentmsg.Message {
	p.t.Helper()
	for {
		switch m := p.next().(type) {
		case *agentmsg.Checkpoint, *agentmsg.Reconfigure:
			return m
		}
	}
}

// helloWith greets like hello, announcing features.
func (p *peer) helloWith(features uint32) *agentmsg.Hello {
	p.t.Helper()
	p.greeting()
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Features: features, Ident: "test"})
	h, ok := p.next().(*agentmsg.Hello)
	if !ok {
		p.t.Fatal("no hello answered")
	}
	return h
}

// sync makes sure the host has read everything sent before it.
func (p *peer) sync(cookie uint64) {
	p.t.Helper()
	p.send(&agentmsg.Ping{Cookie: cookie})
	p.wantPong(cookie)
}

type result struct {
	n   uint32
	err error
}

var (
	toLimits  = ReconfigLimits{MemBytes: 256 << 20, ComputeUnits: 2, Device: "new gpu", Profile: "vgpu-256m"}
	oldLimits = ReconfigLimits{MemBytes: 1 << 30, ComputeUnits: 8, Device: "old gpu", Profile: "vgpu-1g"}
)

// TestCheckpointReconfigure: Checkpoint and Reconfigure carry the limits,
// the deadline and the abort flag, wait for the answers with their
// cookies (stale ones and answers of the wrong kind are ignored), and say
// how many programs did it.
func TestCheckpointReconfigure(t *testing.T) {
	s, _ := serve(t, Config{})
	if s.Reconfigurable() {
		t.Error("Reconfigurable() with no agent")
	}
	p := dial(t, s)
	if h := p.helloWith(agentmsg.FeatureReconfig); h.Features&agentmsg.FeatureReconfig == 0 {
		t.Errorf("host hello = %+v, want FeatureReconfig", h)
	}
	if !s.Reconfigurable() {
		t.Error("Reconfigurable() = false after the agent announced FeatureReconfig")
	}

	res := make(chan result, 1)
	go func() {
		n, err := s.Checkpoint(context.Background(), toLimits, 3*time.Second)
		res <- result{n, err}
	}()
	cp, ok := p.nextReconfigAsk().(*agentmsg.Checkpoint)
	want := agentmsg.Limits{MemBytes: 256 << 20, ComputeUnits: 2, Device: "new gpu", Profile: "vgpu-256m"}
	if !ok || cp.DeadlineMs != 3000 || cp.To != want {
		t.Fatalf("host sent %+v, want Checkpoint with a 3 s deadline to %+v", cp, want)
	}
	p.send(&agentmsg.Checkpointed{Cookie: cp.Cookie + 99, Status: agentmsg.MigrationOK, Programs: 7}) // stale
	p.send(&agentmsg.Quiesced{Cookie: cp.Cookie, Status: agentmsg.MigrationOK, Programs: 8})          // wrong kind
	p.send(&agentmsg.Checkpointed{Cookie: cp.Cookie, Status: agentmsg.MigrationOK, Programs: 2})
	if r := <-res; r.err != nil || r.n != 2 {
		t.Fatalf("Checkpoint = %d, %v; want 2 programs", r.n, r.err)
	}

	go func() {
		n, err := s.Reconfigure(context.Background(), oldLimits, true, time.Second)
		res <- result{n, err}
	}()
	rc, ok := p.nextReconfigAsk().(*agentmsg.Reconfigure)
	if !ok || rc.Flags != agentmsg.ReconfigureAborted || rc.DeadlineMs != 1000 || rc.Now.Device != "old gpu" || rc.Now.MemBytes != 1<<30 {
		t.Fatalf("host sent %+v, want an aborted Reconfigure to the old limits", rc)
	}
	p.send(&agentmsg.Reconfigured{Cookie: rc.Cookie, Status: agentmsg.MigrationOK, Programs: 2})
	if r := <-res; r.err != nil || r.n != 2 {
		t.Fatalf("Reconfigure = %d, %v; want 2 programs", r.n, r.err)
	}

	go func() {
		n, err := s.Reconfigure(context.Background(), toLimits, false, 0)
		res <- result{n, err}
	}()
	if rc, ok := p.nextReconfigAsk().(*agentmsg.Reconfigure); !ok || rc.Flags != 0 || rc.DeadlineMs != 0 {
		t.Fatalf("host sent %+v, want a Reconfigure, not aborted, with the guest's default deadline", rc)
	} else {
		p.send(&agentmsg.Reconfigured{Cookie: rc.Cookie, Status: agentmsg.MigrationFailed, Programs: 1})
	}
	if r := <-res; !errors.Is(r.err, ErrGuestRefused) || errors.Is(r.err, ErrBelowMinimum) || r.n != 1 {
		t.Fatalf("Reconfigure answered Failed = %d, %v; want ErrGuestRefused", r.n, r.err)
	}
}

// TestCheckpointRefused: a "refused" answer wraps ErrBelowMinimum, other
// failures only ErrGuestRefused.
func TestCheckpointRefused(t *testing.T) {
	s, _ := serve(t, Config{})
	p := dial(t, s)
	p.helloWith(agentmsg.FeatureReconfig)
	for _, tc := range []struct {
		status agentmsg.MigrationStatus
		below  bool
	}{
		{agentmsg.ReconfigRefused, true},
		{agentmsg.MigrationTimeout, false},
		{agentmsg.MigrationFailed, false},
		{77, false},
	} {
		res := make(chan result, 1)
		go func() {
			n, err := s.Checkpoint(context.Background(), toLimits, time.Second)
			res <- result{n, err}
		}()
		cp := p.nextReconfigAsk().(*agentmsg.Checkpoint)
		p.send(&agentmsg.Checkpointed{Cookie: cp.Cookie, Status: tc.status, Programs: 1})
		r := <-res
		if !errors.Is(r.err, ErrGuestRefused) || errors.Is(r.err, ErrBelowMinimum) != tc.below || r.n != 1 {
			t.Errorf("Checkpoint answered %v = %d, %v; want ErrGuestRefused, ErrBelowMinimum %v", tc.status, r.n, r.err, tc.below)
		}
	}
}

func TestCheckpointWithoutAgent(t *testing.T) {
	s, _ := serve(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Checkpoint(ctx, toLimits, time.Second); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("Checkpoint with no guest = %v, want ErrNoAgent", err)
	}
	if _, err := s.Reconfigure(ctx, toLimits, false, time.Second); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("Reconfigure with no guest = %v, want ErrNoAgent", err)
	}
}

// TestDeclared: the host keeps the guest's latest Resources, across a
// reconnect, until the agent sends another; a malformed one drops the
// connection and changes nothing. Reconfigurable follows the latest Hello.
func TestDeclared(t *testing.T) {
	s, _ := serve(t, Config{})
	if d := s.Declared(); d != nil {
		t.Errorf("Declared() before any = %+v, want nil", d)
	}
	p := dial(t, s)
	p.helloWith(agentmsg.FeatureReconfig)
	p.send(&agentmsg.Resources{Decls: []agentmsg.Declaration{
		{PID: 10, MinCUs: 1, PrefCUs: 4, MinMem: 1 << 20, PrefMem: 8 << 20, Name: "a"},
		{PID: 11, MinMem: 5, Name: "b"},
	}})
	p.sync(1)
	want := []Declaration{
		{PID: 10, Name: "a", MinMem: 1 << 20, PrefMem: 8 << 20, MinCUs: 1, PrefCUs: 4},
		{PID: 11, Name: "b", MinMem: 5, PrefMem: 5},
	}
	if diff := cmp.Diff(want, s.Declared()); diff != "" {
		t.Errorf("Declared() (-want +got):\n%s", diff)
	}
	s.Declared()[0].Name = "changed" // a copy
	if s.Declared()[0].Name != "a" {
		t.Error("Declared() returns the server's own slice")
	}

	// A Hello without the feature (the last program withdrew).
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Ident: "test"})
	p.sync(2)
	if s.Reconfigurable() {
		t.Error("Reconfigurable() after a Hello without FeatureReconfig")
	}

	// A minimum above the preferred amount is malformed.
	p.send(&agentmsg.Resources{Decls: []agentmsg.Declaration{{MinMem: 10, PrefMem: 9, Name: "bad"}}})
	p.c.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		_, err := p.r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the connection stays open after a malformed Resources")
		}
		if err != nil {
			break
		}
	}
	if diff := cmp.Diff(want, s.Declared()); diff != "" {
		t.Errorf("Declared() after a malformed Resources (-want +got):\n%s", diff)
	}

	// A new connection: the declarations stay until the agent sends
	// others.
	p2 := dial(t, s)
	p2.helloWith(0)
	if diff := cmp.Diff(want, s.Declared()); diff != "" {
		t.Errorf("Declared() after a reconnect (-want +got):\n%s", diff)
	}
	p2.send(&agentmsg.Resources{})
	p2.sync(3)
	if d := s.Declared(); d == nil || len(d) != 0 {
		t.Errorf("Declared() after an empty Resources = %#v, want empty, not nil", d)
	}
}
