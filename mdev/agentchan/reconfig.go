package agentchan

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// Reconfiguration (docs/agent-channel.md "Reconfiguration"): before the
// host moves an instance to another physical device or profile it asks
// the guest's programs to checkpoint and release their device state
// (Checkpoint), and afterwards tells them the limits in effect
// (Reconfigure). The requests share the migration requests' single slot:
// one request to the guest at a time.

// ErrBelowMinimum is wrapped (with ErrGuestRefused) by Checkpoint when the
// guest answers "refused": a program's declared minimum does not fit the
// new limits.
var ErrBelowMinimum = errors.New("agentchan: the new limits are below a guest program's declared minimum")

// Declaration is what one guest program declared.
type Declaration struct {
	PID             uint32
	Name            string
	MinMem, PrefMem uint64
	MinCUs, PrefCUs uint32
}

// Declared returns the guest's latest declarations (nil: none yet; empty:
// the agent said no program registered). They survive a reconnect until
// the agent sends a new set (it does after each of its Hellos); they are
// guest data: show them, never trust them for safety.
func (s *Server) Declared() []Declaration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.declared)
}

// setDeclared keeps the guest's Resources (already validated by the
// decoder: at most agentmsg.MaxDeclarations, minimums within preferred
// amounts, printable names).
func (s *Server) setDeclared(m *agentmsg.Resources) {
	ds := make([]Declaration, 0, len(m.Decls))
	for _, d := range m.Decls {
		ds = append(ds, Declaration{PID: d.PID, Name: d.Name, MinMem: d.MinMem, PrefMem: d.PrefMem, MinCUs: d.MinCUs, PrefCUs: d.PrefCUs})
	}
	s.mu.Lock()
	s.declared = ds
	s.mu.Unlock()
	s.log.Debug("agent channel: guest declarations", "programs", len(ds))
}

// ReconfigLimits are an instance's limits as told to the guest. Device
// and Profile are sent as at most agentmsg.NameLen bytes of printable
// ASCII (longer names are cut, other bytes become '?').
type ReconfigLimits struct {
	MemBytes     uint64
	ComputeUnits uint32
	Device       string
	Profile      string
}

func (l ReconfigLimits) msg() agentmsg.Limits {
	return agentmsg.Limits{MemBytes: l.MemBytes, ComputeUnits: l.ComputeUnits, Device: l.Device, Profile: l.Profile}
}

// deadlineMs is d as a request's deadline_ms (0: the guest's default).
func deadlineMs(d time.Duration) uint32 {
	return uint32(min(max(d.Milliseconds(), 0), math.MaxUint32))
}

// Checkpoint asks the guest's programs to checkpoint (R.1) and release
// their device state (R.2) before a reallocation to `to`, and waits for
// the answer at most until ctx ends (the guest is given deadline). It
// returns how many programs did it. ErrNoAgent when no agent said Hello;
// an answer that is not ok wraps ErrGuestRefused, and a "refused" answer
// also wraps ErrBelowMinimum. Whatever the answer, the guest's programs
// wait for Reconfigure (aborted when the reallocation is given up).
func (s *Server) Checkpoint(ctx context.Context, to ReconfigLimits, deadline time.Duration) (uint32, error) {
	return s.ask(ctx, agentmsg.TypeCheckpointed, func(cookie uint64) agentmsg.Message {
		return &agentmsg.Checkpoint{Cookie: cookie, DeadlineMs: deadlineMs(deadline), To: to.msg()}
	})
}

// Reconfigure tells the programs the limits now in effect (aborted: the
// reallocation did not happen) so they adapt (R.3) and continue (R.4),
// and waits like Checkpoint.
func (s *Server) Reconfigure(ctx context.Context, now ReconfigLimits, aborted bool, deadline time.Duration) (uint32, error) {
	var flags uint32
	if aborted {
		flags = agentmsg.ReconfigureAborted
	}
	return s.ask(ctx, agentmsg.TypeReconfigured, func(cookie uint64) agentmsg.Message {
		return &agentmsg.Reconfigure{Cookie: cookie, Flags: flags, DeadlineMs: deadlineMs(deadline), Now: now.msg()}
	})
}

// Reconfigurable reports whether the connected agent announced
// FeatureReconfig (some guest program registered for reconfiguration) in
// its latest Hello.
func (s *Server) Reconfigurable() bool { return s.agentHas(agentmsg.FeatureReconfig) }

// agentHas reports whether the connected agent announced feature in its
// latest Hello.
func (s *Server) agentHas(feature uint32) bool {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	return c != nil && c.hello.Load() && c.agentFeatures.Load()&feature != 0
}
