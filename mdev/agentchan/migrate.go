package agentchan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// ErrNoAgent is returned when a migration request cannot reach the guest
// agent (no connection, or none that said Hello) before its deadline.
var ErrNoAgent = errors.New("agentchan: no guest agent connected")

// ErrGuestRefused wraps an answer (Quiesced, Resumed, Checkpointed,
// Reconfigured) whose status is not OK.
var ErrGuestRefused = errors.New("agentchan: the guest did not do it")

// request is a migration or reconfiguration request waiting for the
// guest's answer; one at a time.
type request struct {
	kind   agentmsg.Type // the answer's type
	cookie uint64
	reply  chan answer
}

type answer struct {
	status   agentmsg.MigrationStatus
	programs uint32
}

// Quiesce asks the guest to drain and stop using its vGPU
// (docs/agent-channel.md "Migration") and waits for its answer, at most
// until ctx ends; the guest is given deadline. inPlace says the vGPU stays
// at its PCI slot and BAR addresses through the migration: a guest agent
// that announced agentmsg.FeatureInPlace is told (QuiesceInPlace), and its
// programs keep BAR0 mapped. It returns how many guest programs quiesced.
func (s *Server) Quiesce(ctx context.Context, deadline time.Duration, inPlace bool) (uint32, error) {
	return s.ask(ctx, agentmsg.TypeQuiesced, func(cookie uint64) agentmsg.Message {
		var flags uint32
		if inPlace && s.agentHas(agentmsg.FeatureInPlace) {
			flags = agentmsg.QuiesceInPlace
		}
		return &agentmsg.Quiesce{Cookie: cookie, DeadlineMs: uint32(deadline.Milliseconds()), Flags: flags}
	})
}

// Resume tells the guest its vGPU is back (replugged: a new device at the
// same slot) and waits for its answer, as Quiesce does. A guest agent
// that reconnects meanwhile (the VM moved to this host) gets the request
// once it has said Hello.
func (s *Server) Resume(ctx context.Context, replugged bool, deadline time.Duration) (uint32, error) {
	var flags uint32
	if replugged {
		flags = agentmsg.ResumeReplugged
	}
	return s.ask(ctx, agentmsg.TypeResumed, func(cookie uint64) agentmsg.Message {
		return &agentmsg.Resume{Cookie: cookie, Flags: flags, DeadlineMs: uint32(deadline.Milliseconds())}
	})
}

// ResumeArrived is Resume(replugged) for a VM that arrived here by a
// migration with its guest's programs quiesced: on the channel QEMU
// connected, the request follows this host's greeting at once, without
// waiting for the agent's Hello, since the agent (which greeted the
// source) reads it as soon as our Hello has reached it: the guest's resume
// spares a round trip on the channel. With no connection yet it is Resume.
func (s *Server) ResumeArrived(ctx context.Context, deadline time.Duration) (uint32, error) {
	return s.askOn(ctx, agentmsg.TypeResumed, true, func(cookie uint64) agentmsg.Message {
		return &agentmsg.Resume{Cookie: cookie, Flags: agentmsg.ResumeReplugged, DeadlineMs: uint32(deadline.Milliseconds())}
	})
}

// Lost tells the guest that its vGPU was re-plugged with none of its
// state (ResumeReplugged|ResumeLost: vgpud restarted) and waits for its
// answer, as Resume does.
func (s *Server) Lost(ctx context.Context, deadline time.Duration) (uint32, error) {
	return s.ask(ctx, agentmsg.TypeResumed, func(cookie uint64) agentmsg.Message {
		return &agentmsg.Resume{Cookie: cookie, Flags: agentmsg.ResumeReplugged | agentmsg.ResumeLost,
			DeadlineMs: uint32(deadline.Milliseconds())}
	})
}

// Stopping tells the connected guest agent, if it has said Hello, that
// vgpud is stopping and lets fetched commands finish for drain
// (agentmsg.Stopping). It does not wait for anything and reports whether
// the message was queued.
func (s *Server) Stopping(drain time.Duration) bool {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c == nil || !c.hello.Load() {
		return false
	}
	select {
	case c.asks <- &agentmsg.Stopping{DrainMs: uint32(min(drain.Milliseconds(), 1<<31))}:
		c.kick()
		return true
	default:
		return false
	}
}

// WaitAgent waits until a guest agent has said Hello on the channel.
func (s *Server) WaitAgent(ctx context.Context) error {
	for {
		s.mu.Lock()
		c, ch := s.cur, s.helloed
		s.mu.Unlock()
		if c != nil && c.hello.Load() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoAgent, ctx.Err())
		}
	}
}

func (s *Server) ask(ctx context.Context, kind agentmsg.Type, msg func(cookie uint64) agentmsg.Message) (uint32, error) {
	return s.askOn(ctx, kind, false, msg)
}

// askOn sends a request and waits for its answer; early, on a connection
// that exists, it goes out after the greeting without waiting for the
// agent's Hello (ResumeArrived).
func (s *Server) askOn(ctx context.Context, kind agentmsg.Type, early bool, msg func(cookie uint64) agentmsg.Message) (uint32, error) {
	s.mu.Lock()
	early = early && s.cur != nil
	s.mu.Unlock()
	if !early {
		if err := s.WaitAgent(ctx); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	if s.pending != nil {
		s.mu.Unlock()
		return 0, errors.New("agentchan: a migration or reconfiguration request is already waiting")
	}
	s.cookie++
	r := &request{kind: kind, cookie: s.cookie, reply: make(chan answer, 1)}
	s.pending = r
	c := s.cur
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.pending == r {
			s.pending = nil
		}
		s.mu.Unlock()
	}()
	m := msg(r.cookie)
	if c == nil {
		return 0, ErrNoAgent
	}
	q := c.asks
	if early {
		q = c.early
	}
	select {
	case q <- m:
		c.kick()
	default:
		return 0, errors.New("agentchan: requests to the guest agent queued")
	}
	select {
	case a := <-r.reply:
		if a.status == agentmsg.ReconfigRefused && kind == agentmsg.TypeCheckpointed {
			return a.programs, fmt.Errorf("%w: %w (%d programs answered)", ErrGuestRefused, ErrBelowMinimum, a.programs)
		}
		if a.status != agentmsg.MigrationOK {
			return a.programs, fmt.Errorf("%w: %v (%d programs answered)", ErrGuestRefused, a.status, a.programs)
		}
		return a.programs, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("agentchan: waiting for the guest's %v: %w", kind, ctx.Err())
	}
}

// answer delivers a guest's answer to the request waiting for it; others
// (stale cookies, unasked answers) are dropped.
func (s *Server) answer(kind agentmsg.Type, cookie uint64, st agentmsg.MigrationStatus, programs uint32) {
	s.mu.Lock()
	r := s.pending
	s.mu.Unlock()
	if r == nil || r.kind != kind || r.cookie != cookie {
		s.log.Debug("agent channel: unexpected answer", "type", kind, "cookie", cookie)
		return
	}
	select {
	case r.reply <- answer{status: st, programs: programs}:
	default:
	}
}

// helloFrom wakes WaitAgent callers.
func (s *Server) helloFrom(*conn) {
	s.mu.Lock()
	s.lastHello = time.Now()
	close(s.helloed)
	s.helloed = make(chan struct{})
	s.mu.Unlock()
}
