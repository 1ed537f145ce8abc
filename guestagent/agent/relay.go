package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// DefaultRelaySocket is where vgpu-agent serves guest programs.
const DefaultRelaySocket = "/run/vgpu-agent.sock"

// Relay serves the agent channel to other guest programs over a Unix
// socket, answering like the host: Hello, Watch -> Completed (through the
// upstream Client's channel) and the host's Hints. It also answers the
// host's migration requests on behalf of its clients (docs/agent-channel.md
// "Migration"): it forwards each Quiesce or Resume to every client that
// announced agentmsg.FeatureMigration, waits for all of their answers until
// the host's deadline, and answers the host once. It does the same with
// Checkpoint and Reconfigure for the clients that announced
// agentmsg.FeatureReconfig and declared their needs, whose declarations it
// sends the host as one Resources message (docs/agent-channel.md
// "Reconfiguration", reconfig.go).
type Relay struct {
	up  *Client
	l   *net.UnixListener
	log *slog.Logger
	wg  sync.WaitGroup

	mu     sync.Mutex
	conns  map[*relayConn]struct{}
	ops    map[uint64]*relayOp // requests forwarded, by cookie
	cookie uint64              // last cookie used
	closed bool
	seq    uint64 // connections accepted

	// inPlace is set by a Quiesce with QuiesceInPlace and taken by the
	// next Resume, which writes back the vGPU's PCI configuration as the
	// Quiesce found it (saved yields it once saved, nil if it could not
	// be) before its programs get the Resume. pciDir is where the vGPU
	// was last found. Guarded by mu.
	inPlace bool
	saved   chan configRestorer
	pciDir  string
	// saveConfig saves the vGPU's configuration, from its PCI function
	// dir, or found first when dir is "" or no longer holds it
	// (driver.FindPCI, driver.SaveConfig; tests replace it). It returns
	// the directory it used. Guarded by mu.
	saveConfig func(dir string) (configRestorer, string, error)

	// declMu serialises computing the clients' declarations and sending
	// them upstream; guarded by it, what was sent last (reconfig.go).
	declMu   sync.Mutex
	sentOn   bool
	sentDecl []agentmsg.Declaration
}

// relayConn is one guest program's connection.
type relayConn struct {
	c net.Conn
	// out carries frames for the connection's writer (serve), which
	// prefixes the relay's Hello when it has not been sent yet.
	out       chan []byte
	migration atomic.Bool // the program announced FeatureMigration
	inPlace   atomic.Bool // the program announced FeatureInPlace
	reconfig  atomic.Bool // the program announced FeatureReconfig
	pid       uint32      // from SO_PEERCRED; 0: unknown
	seq       uint64      // accept order, for a stable union of declarations

	// Guarded by Relay.mu: the program's last Resources.
	decls    []agentmsg.Declaration
	declared bool
}

// relayOp is a migration or reconfiguration request forwarded to the
// relay's clients. Guarded by Relay.mu.
type relayOp struct {
	answer   agentmsg.Type           // TypeQuiesced, TypeResumed, TypeCheckpointed or TypeReconfigured
	waiting  map[*relayConn]struct{} // clients yet to answer
	ok       int                     // answered MigrationOK
	timeouts int                     // answered MigrationTimeout
	refused  int                     // answered ReconfigRefused to a Checkpoint
	failed   int                     // answered otherwise, or disconnected
	done     chan struct{}           // closed once waiting is empty
}

// finishLocked closes done once every client has answered.
func (op *relayOp) finishLocked() {
	if len(op.waiting) == 0 {
		select {
		case <-op.done:
		default:
			close(op.done)
		}
	}
}

// NewRelay listens on path. It answers the upstream client's migration
// and reconfiguration requests (see Relay), so up announces
// agentmsg.FeatureMigration, and agentmsg.FeatureReconfig while some client
// registered for reconfiguration.
func NewRelay(up *Client, path string, log *slog.Logger) (*Relay, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("relay: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	r := &Relay{up: up, l: l, log: log, conns: map[*relayConn]struct{}{}, ops: map[uint64]*relayOp{},
		saveConfig: saveVGPUConfig}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// Once at start: finds the vGPU for the Quiesce and runs the
		// saving code once, so that in a TCG guest it is no longer cold
		// when a Quiesce needs it (the quiesce is part of the stun).
		r.saveFor(nil)
	}()
	up.setMigrator(r)
	up.setReconfig(r, false, nil)
	return r, nil
}

// Serve accepts guest programs until Close or ctx ends.
func (r *Relay) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	for {
		c, err := r.l.AcceptUnix()
		if err != nil {
			r.wg.Wait()
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("relay: %w", err)
		}
		rc := &relayConn{c: c, out: make(chan []byte, migrationQueue), pid: peerPID(c)}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.seq++
		rc.seq = r.seq
		r.conns[rc] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(rc)
			r.mu.Lock()
			delete(r.conns, rc)
			// A client that goes away in the middle of a request
			// counts as failed: nobody can say it quiesced (or
			// checkpointed).
			for _, op := range r.ops {
				if _, ok := op.waiting[rc]; ok {
					delete(op.waiting, rc)
					op.failed++
					op.finishLocked()
				}
			}
			declared := rc.declared
			r.mu.Unlock()
			if declared {
				r.updateDecls()
			}
		}()
	}
}

// Close stops the relay and its connections.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for rc := range r.conns {
		rc.c.Close()
	}
	r.discardLocked(r.saved)
	r.inPlace, r.saved = false, nil
	r.mu.Unlock()
	err := r.l.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) serve(rc *relayConn) {
	c := rc.c
	defer c.Close()
	var (
		watch atomic.Uint64 // 0 or 1<<32|index
		ready atomic.Bool
	)
	local := make(chan struct{}, 1)
	kick := func() {
		select {
		case local <- struct{}{}:
		default:
		}
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		rd := agentmsg.NewReader(c)
		for {
			m, err := rd.Read()
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *agentmsg.Hello:
				if _, err := agentmsg.Negotiate(m); err != nil {
					return
				}
				rc.migration.Store(m.Features&agentmsg.FeatureMigration != 0)
				rc.inPlace.Store(m.Features&agentmsg.FeatureInPlace != 0)
				if on := m.Features&agentmsg.FeatureReconfig != 0; rc.reconfig.Swap(on) != on {
					r.updateDecls()
				}
				ready.Store(true)
			case *agentmsg.Resources:
				r.resources(rc, m)
			case *agentmsg.Quiesced:
				r.answer(rc, m.Type(), m.Cookie, m.Status)
			case *agentmsg.Resumed:
				r.answer(rc, m.Type(), m.Cookie, m.Status)
			case *agentmsg.Checkpointed:
				r.answer(rc, m.Type(), m.Cookie, m.Status)
			case *agentmsg.Reconfigured:
				r.answer(rc, m.Type(), m.Cookie, m.Status)
			case *agentmsg.Watch:
				for {
					w := watch.Load()
					if w != 0 && int32(uint32(w)-m.Index) <= 0 {
						break
					}
					if watch.CompareAndSwap(w, 1<<32|uint64(m.Index)) {
						break
					}
				}
				r.up.send(m) // best effort: re-sent on every upstream change
			}
			kick()
		}
	}()
	greeted := false
	greet := func(buf []byte) []byte {
		if greeted {
			return buf
		}
		greeted = true
		v := uint16(agentmsg.Version)
		return agentmsg.Append(buf, &agentmsg.Hello{MinVersion: v, MaxVersion: v,
			Features: agentmsg.FeatureWatch | agentmsg.FeatureHints | agentmsg.FeatureMigration | agentmsg.FeatureReconfig |
				agentmsg.FeatureInPlace, Ident: "vgpu-agent relay"})
	}
	var lastHints agentmsg.Hints
	lastStops, _ := r.up.Stopping() // a program that connects later is not told
	for {
		ch := r.up.Changed()
		if ready.Load() {
			buf := greet(nil)
			done := r.up.Done()
			if w := watch.Load(); w != 0 {
				if int32(done-1-uint32(w)) >= 0 {
					if watch.CompareAndSwap(w, 0) {
						buf = agentmsg.Append(buf, &agentmsg.Completed{Done: done})
					}
				} else {
					r.up.send(&agentmsg.Watch{Index: uint32(w)})
				}
			}
			if h, ok := r.up.Hints(); ok && h != lastHints {
				lastHints = h
				buf = agentmsg.Append(buf, &h)
			}
			// The host's Stopping, passed on once to each program.
			if n, drain := r.up.Stopping(); n != lastStops {
				lastStops = n
				buf = agentmsg.Append(buf, &agentmsg.Stopping{DrainMs: uint32(drain.Milliseconds())})
			}
			if len(buf) > 0 {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}
		select {
		case <-readDone:
			return
		case <-ch:
		case <-local:
		case frame := <-rc.out:
			// Only clients that sent Hello get migration and
			// reconfiguration requests.
			if _, err := c.Write(append(greet(nil), frame...)); err != nil {
				return
			}
		}
	}
}

// migrate implements migrator for the upstream client: it forwards req to
// every client that announced FeatureMigration (a Quiesce or Resume) or
// that is a reconfiguration client (a Checkpoint or Reconfigure: it
// announced FeatureReconfig and sent Resources), and answers for all of
// them (docs/agent-channel.md "Migration", "Reconfiguration"): OK only if
// all answered OK; else Refused if any refused a Checkpoint; else Failed if
// any failed or went away; else Timeout (some answered Timeout or did not
// answer by the deadline). programs counts the OK answers.
func (r *Relay) migrate(ctx context.Context, req agentmsg.Message) (agentmsg.MigrationStatus, uint32) {
	// Leave the clients a margin to answer before the host's deadline.
	var ms uint32
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		left -= min(left/10, 500*time.Millisecond)
		ms = uint32(max(left.Milliseconds(), 1))
	}
	r.inPlaceConfig(req)
	r.mu.Lock()
	r.cookie++
	cookie := r.cookie
	op := &relayOp{waiting: map[*relayConn]struct{}{}, done: make(chan struct{})}
	var fwd, plain agentmsg.Message // plain: for clients without FeatureInPlace
	asked := func(rc *relayConn) bool { return rc.migration.Load() }
	switch req := req.(type) {
	case *agentmsg.Quiesce:
		op.answer = agentmsg.TypeQuiesced
		fwd = &agentmsg.Quiesce{Cookie: cookie, DeadlineMs: ms, Flags: req.Flags}
		plain = &agentmsg.Quiesce{Cookie: cookie, DeadlineMs: ms}
	case *agentmsg.Resume:
		op.answer = agentmsg.TypeResumed
		fwd = &agentmsg.Resume{Cookie: cookie, Flags: req.Flags, DeadlineMs: ms}
	case *agentmsg.Checkpoint:
		op.answer, asked = agentmsg.TypeCheckpointed, reconfigClientLocked
		fwd = &agentmsg.Checkpoint{Cookie: cookie, DeadlineMs: ms, To: req.To}
	case *agentmsg.Reconfigure:
		op.answer, asked = agentmsg.TypeReconfigured, reconfigClientLocked
		fwd = &agentmsg.Reconfigure{Cookie: cookie, Flags: req.Flags, DeadlineMs: ms, Now: req.Now}
	default:
		r.mu.Unlock()
		return agentmsg.MigrationFailed, 0
	}
	frame, plainFrame := agentmsg.Marshal(fwd), []byte(nil)
	if plain != nil {
		plainFrame = agentmsg.Marshal(plain)
	}
	for rc := range r.conns {
		if !asked(rc) {
			continue
		}
		f := frame
		if plainFrame != nil && !rc.inPlace.Load() {
			f = plainFrame
		}
		select {
		case rc.out <- f:
			op.waiting[rc] = struct{}{}
		default: // its writer is stuck
			op.failed++
		}
	}
	op.finishLocked()
	r.ops[cookie] = op
	r.mu.Unlock()

	select {
	case <-op.done:
	case <-ctx.Done():
	}
	r.mu.Lock()
	delete(r.ops, cookie)
	late := len(op.waiting)
	ok, timeouts, refused, failed := op.ok, op.timeouts, op.refused, op.failed
	r.mu.Unlock()
	status := agentmsg.MigrationOK
	switch {
	case refused > 0:
		status = agentmsg.ReconfigRefused
	case failed > 0:
		status = agentmsg.MigrationFailed
	case timeouts > 0 || late > 0:
		status = agentmsg.MigrationTimeout
	}
	r.log.Debug("relay: request answered", "request", req.Type(), "status", status, "ok", ok, "refused", refused,
		"failed", failed, "timeouts", timeouts, "late", late)
	return status, uint32(ok)
}

// configRestorer writes a saved PCI configuration back
// (driver.SavedConfig).
type configRestorer interface {
	Restore() (bool, error)
	Close() error // for one not restored (Restore closes itself)
}

// inPlaceConfig keeps the vGPU's PCI configuration across a migration in
// place: at a Quiesce with QuiesceInPlace it saves what to write back
// (the kernel's addresses for the BARs, found while the VM still runs on
// the source), and at the Resume that follows it writes that back before
// any program is told, so that the programs find the BAR0 they kept mapped
// answering. The destination's VMM may have come up with the
// configuration reset (QEMU's vfio-user-pci carries none of it); when the
// migration was abandoned nothing is written. Failures are logged: a
// program that finds BAR0 dark reopens the device.
func (r *Relay) inPlaceConfig(req agentmsg.Message) {
	switch req := req.(type) {
	case *agentmsg.Quiesce:
		r.mu.Lock()
		defer r.mu.Unlock()
		r.discardLocked(r.saved) // a Quiesce again: the last one's was not restored
		r.inPlace, r.saved = req.Flags&agentmsg.QuiesceInPlace != 0 && !r.closed, nil
		if r.inPlace {
			// Saved while the programs drain, not before they are asked.
			saved := make(chan configRestorer, 1)
			r.saved = saved
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.saveFor(saved)
			}()
		}
	case *agentmsg.Resume:
		r.mu.Lock()
		on, saved := r.inPlace, r.saved
		r.inPlace, r.saved = false, nil
		if !on || req.Flags&agentmsg.ResumeLost != 0 {
			r.discardLocked(saved)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		c := <-saved
		if c == nil {
			return
		}
		start := time.Now()
		did, err := c.Restore()
		if err != nil {
			r.log.Warn("relay: in-place migration: PCI configuration not restored; programs will reopen the device", "err", err)
			return
		}
		r.log.Debug("relay: in-place migration: PCI configuration", "restored", did, "took", time.Since(start))
	}
}

// discardLocked closes the configuration saved gets (nil: none) once it is
// saved, for one that will not be restored. Caller holds mu.
func (r *Relay) discardLocked(saved chan configRestorer) {
	if saved == nil {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if c := <-saved; c != nil {
			c.Close()
		}
	}()
}

// saveFor saves the vGPU's configuration, where it was last found, and
// sends it on out (if not nil; nil when it could not be saved).
func (r *Relay) saveFor(out chan<- configRestorer) {
	r.mu.Lock()
	save, dir := r.saveConfig, r.pciDir
	r.mu.Unlock()
	c, dir, err := save(dir)
	if err != nil {
		if out != nil {
			r.log.Warn("relay: in-place migration: the vGPU's configuration not saved; programs will reopen it", "err", err)
		}
		c = nil
	} else {
		r.mu.Lock()
		r.pciDir = dir
		r.mu.Unlock()
	}
	if out != nil {
		out <- c
	}
}

// answer records a client's Quiesced, Resumed, Checkpointed or
// Reconfigured; answers to requests that are over (or never were) are
// ignored.
func (r *Relay) answer(rc *relayConn, t agentmsg.Type, cookie uint64, status agentmsg.MigrationStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.ops[cookie]
	if op == nil || op.answer != t {
		return
	}
	if _, ok := op.waiting[rc]; !ok {
		return
	}
	delete(op.waiting, rc)
	switch status {
	case agentmsg.MigrationOK:
		op.ok++
	case agentmsg.MigrationTimeout:
		op.timeouts++
	case agentmsg.ReconfigRefused:
		if op.answer != agentmsg.TypeCheckpointed {
			op.failed++ // only a Checkpoint can be refused
			break
		}
		op.refused++
	default:
		op.failed++
	}
	op.finishLocked()
}

// migrationClients counts the connected clients that announced
// FeatureMigration.
func (r *Relay) migrationClients() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for rc := range r.conns {
		if rc.migration.Load() {
			n++
		}
	}
	return n
}
