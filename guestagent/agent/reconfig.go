package agent

import (
	"cmp"
	"context"
	"errors"
	"os"
	"slices"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// Reconfiguration (docs/agent-channel.md "Reconfiguration"): before vgpud
// moves a VM's vGPU to another physical device or profile (smaller or
// larger), it asks the guest's programs to checkpoint and release their
// device state (Checkpoint); afterwards it tells them the limits now in
// effect, and they adapt and continue (Reconfigure). Requests share the
// migration requests' queue: they are answered in order, one at a time,
// and never interleave with a Quiesce or Resume.

// ErrRefused is what a ReconfigHandler's Checkpoint wraps when the limits
// it is asked to checkpoint for are below its declared minimum; the host
// is answered agentmsg.ReconfigRefused.
var ErrRefused = errors.New("agent: the new limits are below the program's declared minimum")

// Resources are what a program declares it needs of the vGPU: the least
// device memory and compute units it can run with, and what it would use
// (0: the minimum). Name is the program's name (printable ASCII, at most
// agentmsg.NameLen bytes; longer names are cut). The host shows them to the
// operator and may weigh them when it reallocates; it never trusts them
// for safety.
type Resources struct {
	MinMem, PrefMem uint64
	MinCUs, PrefCUs uint32
	Name            string
}

// ReconfigHandler is what a guest program does when the host reallocates
// its vGPU (R.1-R.4 of docs/agent-channel.md "Reconfiguration"). Each
// method must return when ctx ends; its deadline is the host's, shared by
// Checkpoint and Cleanup, and by Reconfigure and Resume.
type ReconfigHandler interface {
	// Checkpoint (R.1) saves, in the program's own memory, what it needs
	// to continue (its device buffers' contents, its position) and stops
	// using the device until Resume. It returns an error wrapping
	// ErrRefused, before it stops anything, when to is below the
	// program's declared minimum.
	Checkpoint(ctx context.Context, to agentmsg.Limits) error
	// Cleanup (R.2) frees the program's device buffers and programs, so
	// that the instance holds nothing of it during the reallocation. It
	// is called only after Checkpoint returned nil.
	Cleanup(ctx context.Context) error
	// Reconfigure (R.3) adapts the program to the limits in effect:
	// the new ones, or the old ones when the reallocation was aborted. It
	// may come without a successful Checkpoint before it (the host aborts
	// after a refusal, a failure or a timeout of any program, and tells
	// every program).
	Reconfigure(ctx context.Context, now agentmsg.Limits) error
	// Resume (R.4) recreates what Cleanup freed, restores the
	// checkpoint and lets the program continue. It is called after
	// Reconfigure even when Reconfigure failed, so that a program is never
	// left stopped by the agent; a program that did not checkpoint has
	// nothing to do.
	Resume(ctx context.Context) error
}

// HandleReconfig makes the client answer the host's Checkpoint and
// Reconfigure by calling h, announce agentmsg.FeatureReconfig in its Hello
// and declare r (as this process) in the Resources message it sends after
// every Hello. Called again, it replaces the handler and sends the new
// declaration at once (and Hello again, when the channel is up and the
// feature was not announced); h nil withdraws: the client sends Hello
// without the feature and an empty Resources.
//
// A Checkpoint runs h.Checkpoint and then, if it succeeded, h.Cleanup,
// under the request's deadline (deadline_ms, or
// DefaultMigrationDeadline), and is answered Checkpointed: OK with
// programs 1 when both returned nil; Refused when Checkpoint's error wraps
// ErrRefused; Timeout when the error wraps context.DeadlineExceeded or
// driver.ErrTimeout; Failed otherwise. A Reconfigure runs h.Reconfigure
// then h.Resume and is answered Reconfigured the same way (never Refused).
// A client without a handler answers both OK with programs 0.
func (c *Client) HandleReconfig(r Resources, h ReconfigHandler) {
	if h == nil {
		c.setReconfig(nil, false, nil)
		return
	}
	d := agentmsg.Declaration{PID: uint32(os.Getpid()), MinCUs: r.MinCUs, PrefCUs: r.PrefCUs,
		MinMem: r.MinMem, PrefMem: r.PrefMem, Name: r.Name}
	// A preferred amount below the minimum is malformed on the wire (the
	// peer would drop the channel): read it as the minimum.
	if d.PrefCUs < d.MinCUs {
		d.PrefCUs = d.MinCUs
	}
	if d.PrefMem < d.MinMem {
		d.PrefMem = d.MinMem
	}
	c.setReconfig(handlerReconfig{h}, true, []agentmsg.Declaration{d})
}

// setReconfig installs rec (the requests' handler), whether to announce
// FeatureReconfig and the declarations to send; on a connection that is
// open it sends them at once, after a new Hello if the feature changed.
func (c *Client) setReconfig(rec migrator, on bool, decls []agentmsg.Declaration) {
	c.helloMu.Lock()
	defer c.helloMu.Unlock()
	c.mu.Lock()
	changed := c.recOn != on
	c.rec, c.recOn, c.decls = rec, on, decls
	rwc := c.rwc
	var b []byte
	if changed {
		b = c.greetingLocked()
	} else {
		b = agentmsg.Marshal(&agentmsg.Resources{Decls: decls})
	}
	c.mu.Unlock()
	if rwc != nil {
		// Best effort: if the write fails the connection is failing, and
		// the next one starts with the new Hello and declarations.
		rwc.Write(b)
	}
}

// greetingLocked is what the client sends to greet: its Hello, then its
// declarations (an empty set when no program registered, so that a peer
// forgets those of an earlier greeting). Caller holds mu.
func (c *Client) greetingLocked() []byte {
	return agentmsg.Append(agentmsg.Marshal(c.helloLocked()), &agentmsg.Resources{Decls: c.decls})
}

// handlerReconfig adapts a program's ReconfigHandler.
type handlerReconfig struct{ h ReconfigHandler }

func (hr handlerReconfig) migrate(ctx context.Context, req agentmsg.Message) (agentmsg.MigrationStatus, uint32) {
	var err error
	switch req := req.(type) {
	case *agentmsg.Checkpoint:
		if err = hr.h.Checkpoint(ctx, req.To); err == nil {
			err = hr.h.Cleanup(ctx)
		} else if errors.Is(err, ErrRefused) {
			return agentmsg.ReconfigRefused, 0
		}
	case *agentmsg.Reconfigure:
		err = hr.h.Reconfigure(ctx, req.Now)
		err = errors.Join(err, hr.h.Resume(ctx))
	default:
		return agentmsg.MigrationFailed, 0
	}
	return answerOf(err)
}

// reconfigClientLocked reports whether rc is a reconfiguration client: it
// announced FeatureReconfig and sent Resources. Caller holds Relay.mu.
func reconfigClientLocked(rc *relayConn) bool { return rc.reconfig.Load() && rc.declared }

// resources records a client's declarations, each stamped with the
// client's PID when SO_PEERCRED gave one (else the PID it sent), and
// sends the host the new union if it changed.
func (r *Relay) resources(rc *relayConn, m *agentmsg.Resources) {
	decls := slices.Clone(m.Decls)
	if rc.pid != 0 {
		for i := range decls {
			decls[i].PID = rc.pid
		}
	}
	r.mu.Lock()
	rc.decls, rc.declared = decls, true
	r.mu.Unlock()
	r.updateDecls()
}

// updateDecls sends the host (through the upstream client) the union of
// the reconfiguration clients' declarations, in the order the clients
// connected, and announces FeatureReconfig while there is one, if either
// changed since the last time.
func (r *Relay) updateDecls() {
	r.declMu.Lock()
	defer r.declMu.Unlock()
	r.mu.Lock()
	var cs []*relayConn
	for rc := range r.conns {
		if reconfigClientLocked(rc) {
			cs = append(cs, rc)
		}
	}
	slices.SortFunc(cs, func(a, b *relayConn) int { return cmp.Compare(a.seq, b.seq) })
	var union []agentmsg.Declaration
	for _, rc := range cs {
		union = append(union, rc.decls...)
	}
	r.mu.Unlock()
	on := len(cs) > 0
	if on == r.sentOn && slices.Equal(union, r.sentDecl) {
		return
	}
	if len(union) > agentmsg.MaxDeclarations {
		r.log.Warn("relay: too many declarations for one Resources message; the host sees the first ones",
			"declarations", len(union), "max", agentmsg.MaxDeclarations)
	}
	r.sentOn, r.sentDecl = on, union
	r.up.setReconfig(r, on, union)
}

// reconfigClients counts the connected reconfiguration clients.
func (r *Relay) reconfigClients() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for rc := range r.conns {
		if reconfigClientLocked(rc) {
			n++
		}
	}
	return n
}
