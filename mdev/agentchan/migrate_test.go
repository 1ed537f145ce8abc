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
		n, err := s.Quiesce(context.Background(), 3*time.Second)
		res <- result{n, err}
	}()
	q, ok := p.nextAsk().(*agentmsg.Quiesce)
	if !ok || q.DeadlineMs != 3000 {
		t.Fatalf("host sent %+v, want Quiesce with a 3 s deadline", q)
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
	if _, err := s.Quiesce(ctx, time.Second); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("Quiesce with no guest = %v, want ErrNoAgent", err)
	}
}
