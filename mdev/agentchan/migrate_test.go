package agentchan

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// nextAsk returns the next Quiesce or Resume the host sends.
func (p *peer) nextAsk() agentmsg.Message {
	p.t.Helper()
	for {
		switch m := p.next().(type) {
		case *agentmsg.Quiesce, *agentmsg.Resume:
			return m
		}
	}
}

// TestQuiesceResume: Quiesce and Resume wait for the guest's answers with
// their cookies; a stale answer is ignored; a refusal is an error; a
// guest that never says Hello makes the request fail with ctx.
func TestQuiesceResume(t *testing.T) {
	s, _ := serve(t, Config{})
	p := dial(t, s)
	p.hello()

	type result struct {
		n   uint32
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := s.Quiesce(context.Background(), 3*time.Second, true)
		res <- result{n, err}
	}()
	q, ok := p.nextAsk().(*agentmsg.Quiesce)
	if !ok || q.DeadlineMs != 3000 || q.Flags != 0 {
		t.Fatalf("host sent %+v, want Quiesce with a 3 s deadline, without flags to an agent without FeatureInPlace", q)
	}
	p.send(&agentmsg.Quiesced{Cookie: q.Cookie + 99, Status: agentmsg.MigrationOK, Programs: 7}) // stale
	p.send(&agentmsg.Quiesced{Cookie: q.Cookie, Status: agentmsg.MigrationOK, Programs: 2})
	if r := <-res; r.err != nil || r.n != 2 {
		t.Fatalf("Quiesce = %d, %v; want 2 programs", r.n, r.err)
	}

	go func() {
		n, err := s.Resume(context.Background(), true, time.Second)
		res <- result{n, err}
	}()
	rs, ok := p.nextAsk().(*agentmsg.Resume)
	if !ok || rs.Flags&agentmsg.ResumeReplugged == 0 {
		t.Fatalf("host sent %+v, want Resume with Replugged", rs)
	}
	p.send(&agentmsg.Resumed{Cookie: rs.Cookie, Status: agentmsg.MigrationTimeout, Programs: 1})
	if r := <-res; !errors.Is(r.err, ErrGuestRefused) {
		t.Fatalf("Resume answered with a timeout = %v, want ErrGuestRefused", r.err)
	}
}

func TestQuiesceWithoutAgent(t *testing.T) {
	s, _ := serve(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Quiesce(ctx, time.Second, false); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("Quiesce with no guest = %v, want ErrNoAgent", err)
	}
}

// TestQuiesceInPlace: a migration in place is said to an agent that
// announced FeatureInPlace, and only in place.
func TestQuiesceInPlace(t *testing.T) {
	s, _ := serve(t, Config{})
	p := dial(t, s)
	p.helloWith(agentmsg.FeatureMigration | agentmsg.FeatureInPlace)
	for _, inPlace := range []bool{true, false} {
		res := make(chan error, 1)
		go func() {
			_, err := s.Quiesce(context.Background(), time.Second, inPlace)
			res <- err
		}()
		q, ok := p.nextAsk().(*agentmsg.Quiesce)
		if want := map[bool]uint32{true: agentmsg.QuiesceInPlace}[inPlace]; !ok || q.Flags != want {
			t.Fatalf("in place %v: host sent %+v, want flags %#x", inPlace, q, want)
		}
		p.send(&agentmsg.Quiesced{Cookie: q.Cookie, Status: agentmsg.MigrationOK, Programs: 1})
		if err := <-res; err != nil {
			t.Fatalf("Quiesce = %v", err)
		}
	}
}

// TestResumeArrived: on a connection whose agent has not said Hello (it
// greeted the source host), the Resume follows our greeting at once and
// is answered after the agent's Hello; with no connection it waits for an
// agent like Resume.
func TestResumeArrived(t *testing.T) {
	s, _ := serve(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.ResumeArrived(ctx, time.Second); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("ResumeArrived with no connection = %v, want ErrNoAgent", err)
	}

	p := dial(t, s)
	p.greeting()
	res := make(chan error, 1)
	go func() {
		_, err := s.ResumeArrived(context.Background(), 2*time.Second)
		res <- err
	}()
	r, ok := p.next().(*agentmsg.Resume)
	if !ok || r.Flags != agentmsg.ResumeReplugged || r.DeadlineMs != 2000 {
		t.Fatalf("after the greeting the host sent %+v, want Resume (replugged, 2 s) before any Hello of ours", r)
	}
	p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Ident: "test"})
	p.send(&agentmsg.Resumed{Cookie: r.Cookie, Status: agentmsg.MigrationOK, Programs: 1})
	if err := <-res; err != nil {
		t.Fatalf("ResumeArrived = %v", err)
	}
}
