package mdev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mmio"
)

// An upgrade in place (docs/upgrade.md) pauses the manager in the old
// process (Pause), describes it (Export) for a new process that adopts it
// (Config.Adopt, then Start), and resumes it (Unpause) if the new process
// failed. While paused nothing reads from QEMU, the guest agents or the
// workers: what they send waits in the sockets for whichever process
// serves next.

// Adoption is what a new process adopts: the State an old one handed over
// and the descriptors that came with it.
type Adoption struct {
	State handover.State
	FDs   *handover.Table
}

// Pause stops every instance between two messages and quiesces the
// workers. On error the caller calls Unpause.
func (m *Manager) Pause(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrManagerClosed
	}
	if m.paused {
		m.mu.Unlock()
		return errors.New("pause: already paused")
	}
	for _, in := range m.instances {
		if in.relocating.Load() {
			m.mu.Unlock()
			return fmt.Errorf("pause: instance %s is being moved (or is suspended to host memory): %w", in.uuid, ErrReallocating)
		}
	}
	m.paused = true
	m.resume = make(chan struct{})
	resume := m.resume
	insts := make([]*Instance, 0, len(m.instances))
	for _, in := range m.instances {
		insts = append(insts, in)
	}
	m.mu.Unlock()
	for _, in := range insts {
		if err := in.pause(ctx, resume); err != nil {
			return fmt.Errorf("pause instance %s: %w", in.uuid, err)
		}
	}
	if err := m.pool.Pause(ctx); err != nil {
		return fmt.Errorf("pause workers: %w", err)
	}
	return nil
}

func (i *Instance) pause(ctx context.Context, resume <-chan struct{}) error {
	i.mu.Lock()
	c, done, l := i.conn, i.connDone, i.listener
	parked := make(chan struct{})
	i.parked, i.resume = parked, resume
	i.mu.Unlock()
	if l != nil {
		l.SetDeadline(time.Unix(1, 0))
	}
	if a := i.agent.Load(); a != nil {
		if err := a.Pause(ctx); err != nil {
			return err
		}
	}
	if c == nil {
		return nil
	}
	pc, ok := c.(transport.Pausable)
	if !ok {
		return fmt.Errorf("instance %s: its %T session cannot be handed over: %w", i.uuid, c, ErrNotPausable)
	}
	pc.Pause()
	select {
	case <-parked:
	case <-done: // QEMU hung up meanwhile
	case <-ctx.Done():
		return fmt.Errorf("stop serving QEMU: %w", ctx.Err())
	}
	return nil
}

// Unpause undoes Pause: the handover was abandoned.
func (m *Manager) Unpause() {
	m.mu.Lock()
	if !m.paused {
		m.mu.Unlock()
		return
	}
	m.paused = false
	resume := m.resume
	insts := make([]*Instance, 0, len(m.instances))
	for _, in := range m.instances {
		insts = append(insts, in)
	}
	m.mu.Unlock()
	m.pool.Resume()
	for _, in := range insts {
		i := in
		i.mu.Lock()
		l := i.listener
		i.mu.Unlock()
		if l != nil {
			l.SetDeadline(time.Time{})
		}
		if a := i.agent.Load(); a != nil {
			a.Unpause()
		}
	}
	close(resume)
}

// Checkpoint is what RollBack compares with: each instance's completion
// count when the manager was paused for a handover.
type Checkpoint struct {
	done map[string]uint32
}

// Checkpoint records the paused manager's completion counts, before the
// new process of an upgrade may serve (docs/upgrade.md, "Probation").
func (m *Manager) Checkpoint() Checkpoint {
	c := Checkpoint{done: map[string]uint32{}}
	for _, in := range m.List() {
		c.done[in.uuid] = in.be.Done()
	}
	return c
}

// RollBackReport says what RollBack found the new process had changed.
type RollBackReport struct {
	Instances int // instances served again
	Tails     int // register files whose tail (or tail shadow) the new process had moved
	Woken     int // instances whose guest was signalled a completion again
}

// RollBack resumes the paused manager of an old process whose upgrade
// committed and then rolled back: the new process served, on probation,
// and died (docs/upgrade.md, "Probation"). Every instance, its VM and
// agent connections and its worker (whose device state never left it)
// are this process's again, as Unpause gives them back; what the new
// process changed meanwhile is taken from where it is kept outside the
// dead process: the tail and the tail shadow the guest last wrote are
// those the register file published in the instance page; a completion
// the new process may have signalled but the guest not yet acknowledged
// (the notify eventfd it read is empty now) is signalled again when the
// ring completed anything since c. The instance page's values are the
// worker's to overwrite: they are latched as the guest's register
// values, which only the guest reads back.
func (m *Manager) RollBack(c Checkpoint) RollBackReport {
	var rep RollBackReport
	insts := m.List()
	for _, in := range insts {
		sh := in.be.Shared()
		r := in.regs.State()
		moved := false
		if t := sh.Tail.Load(); t != r.Tail {
			r.Tail, moved = t, true
		}
		if s := sh.Shadow.Load(); s != 0 && s != r.Shadow {
			r.Shadow, moved = s, true
		}
		if moved {
			in.regs.SetState(r)
			rep.Tails++
		}
	}
	m.Unpause()
	for _, in := range insts {
		rep.Instances++
		done := in.be.Done()
		if was, ok := c.done[in.uuid]; ok && done != was {
			in.notify(done - 1)
			rep.Woken++
		}
	}
	return rep
}

// waitResume waits, in an accept loop stopped by a pause, for Unpause
// (true) or the manager's end (false).
func (m *Manager) waitResume() bool {
	m.mu.Lock()
	paused, resume := m.paused, m.resume
	m.mu.Unlock()
	if !paused {
		return true
	}
	select {
	case <-resume:
		return true
	case <-m.ctx.Done():
		return false
	}
}

// ErrHandedOver is what the manager of an old process answers after
// HandOver: a new process serves its instances.
var ErrHandedOver = errors.New("handed over to a new vgpud")

// HandOver marks the paused manager as handed over, once the new process
// is ready and before the old one commits (docs/upgrade.md): from then on
// its instances, sockets and workers are the new process's, and nothing
// of this one touches them. The manager forgets its instances, refuses
// everything, Close does nothing and Drain finds nothing; the worker pool
// likewise (worker.Pool.HandOver). The old process then exits without
// cleaning up, which frees only its own copies of the descriptors.
func (m *Manager) HandOver() {
	m.mu.Lock()
	m.handedOver = true
	m.closed = true
	m.instances = map[string]*Instance{}
	m.adopt, m.adopted = nil, nil
	m.mu.Unlock()
	m.pool.HandOver()
}

// Export describes the paused manager; every descriptor goes into tab as
// a duplicate (the manager keeps its own until the process exits).
func (m *Manager) Export(tab *handover.Table) ([]handover.Instance, []handover.Worker, []handover.Domain, error) {
	ws, ds, poolPart, err := m.pool.Export(tab)
	if err != nil {
		return nil, nil, nil, err
	}
	var out []handover.Instance
	for _, in := range m.List() {
		h := handover.Instance{UUID: in.uuid, Listener: handover.None}
		if err := poolPart(in.uuid, &h); err != nil {
			return nil, nil, nil, err
		}
		if err := in.export(tab, &h); err != nil {
			return nil, nil, nil, fmt.Errorf("instance %s: %w", in.uuid, err)
		}
		out = append(out, h)
	}
	return out, ws, ds, nil
}

func (i *Instance) export(tab *handover.Table, h *handover.Instance) error {
	img := i.cfg.Image()
	h.Config = img[:]
	r := i.regs.State()
	h.Regs = handover.Regs{RingBase: r.RingBase, ComplBase: r.ComplBase, Slots: r.Slots, Tail: r.Tail, Keep: r.Keep,
		IntStatus: r.IntStatus, IntEnable: r.IntEnable, Shadow: r.Shadow, PollWord: r.PollWord}
	i.mu.Lock()
	c, l := i.conn, i.listener
	i.mu.Unlock()
	var err error
	if l != nil {
		if h.Listener, err = tab.AddConn(l); err != nil {
			return fmt.Errorf("listener: %w", err)
		}
	}
	if c != nil {
		pc, ok := c.(transport.Pausable)
		if !ok {
			return fmt.Errorf("vm connection: %T: %w", c, ErrNotPausable)
		}
		ho, ferr := pc.Handover()
		if ferr != nil {
			return fmt.Errorf("vm connection: %w", ferr)
		}
		if h.QEMU, err = exportQEMU(tab, ho); err != nil {
			return fmt.Errorf("vm connection: %w", err)
		}
	}
	if a := i.agent.Load(); a != nil {
		ah := a.Handover()
		ag := &handover.Agent{Conn: handover.None, Unread: ah.Unread, Watch: ah.Watch}
		if ag.Listener, err = tab.AddConn(ah.Listener); err != nil {
			return fmt.Errorf("agent listener: %w", err)
		}
		if ah.Conn != nil {
			if ag.Conn, err = tab.AddConn(ah.Conn); err != nil {
				return fmt.Errorf("agent connection: %w", err)
			}
		}
		h.Agent = ag
	}
	return nil
}

// exportQEMU describes a paused VM connection for the handover state. A
// session with no state of its own and no extra fds or two (mpqemu's
// irqfd and resample eventfd) is written as every release wrote it, so
// that an earlier release can adopt it (a roll back); any other with
// Extra and Session.
func exportQEMU(tab *handover.Table, ho transport.Handover) (*handover.QEMU, error) {
	q := &handover.QEMU{IRQ: handover.None, Resample: handover.None}
	var err error
	if q.Conn, err = tab.Add(ho.Conn); err != nil {
		return nil, err
	}
	if len(ho.State) == 0 && len(ho.Extra) == 2 {
		if q.IRQ, err = tab.Add(ho.Extra[0]); err != nil {
			return nil, err
		}
		if q.Resample, err = tab.Add(ho.Extra[1]); err != nil {
			return nil, err
		}
		return q, nil
	}
	if len(ho.Extra) > handover.MaxExtra {
		return nil, fmt.Errorf("%d extra fds, the handover state holds %d", len(ho.Extra), handover.MaxExtra)
	}
	for _, fd := range ho.Extra {
		i, err := tab.Add(fd)
		if err != nil {
			return nil, err
		}
		q.Extra = append(q.Extra, i)
	}
	q.Session = ho.State
	return q, nil
}

// unixListener makes a listener of a descriptor handed over.
func unixListener(fd int, name string) (*net.UnixListener, error) {
	if fd < 0 {
		return nil, fmt.Errorf("%s: no descriptor", name)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("%s: %T is not a unix listener", name, l)
	}
	ul.SetUnlinkOnClose(false)
	return ul, nil
}

// unixConn makes a connection of a descriptor handed over.
func unixConn(fd int, name string) (*net.UnixConn, error) {
	if fd < 0 {
		return nil, fmt.Errorf("%s: no descriptor", name)
	}
	return scmrights.UnixConn(fd, name)
}

// adoptedInstance is what Start runs for an instance handed over.
type adoptedInstance struct {
	in    *Instance
	fresh bool            // its sockets are new ones, already served
	conn  *net.UnixConn   // the VM's connection, nil when none was attached
	extra []int           // its transport's extra fds (mpqemu: irqfd, resample)
	state json.RawMessage // its transport's state of the session (vfio-user)
}

// adoptLocked gives a new instance what the old process handed over for
// it: register file, config space, sockets; Start serves them.
func (m *Manager) adoptLocked(inst *Instance, h handover.Instance) error {
	tab := m.adoption.FDs
	inst.regs.SetState(mmio.RegState{RingBase: h.Regs.RingBase, ComplBase: h.Regs.ComplBase, Slots: h.Regs.Slots, Tail: h.Regs.Tail,
		Keep: h.Regs.Keep, IntStatus: h.Regs.IntStatus, IntEnable: h.Regs.IntEnable, Shadow: h.Regs.Shadow, PollWord: h.Regs.PollWord})
	var img [mmio.ConfigSize]byte
	copy(img[:], h.Config)
	inst.cfg.SetImage(img)
	a := &adoptedInstance{in: inst}
	if h.QEMU != nil {
		c, err := unixConn(tab.Take(h.QEMU.Conn), "qemu connection")
		if err != nil {
			return err
		}
		a.conn = c
		if irq, res := tab.Take(h.QEMU.IRQ), tab.Take(h.QEMU.Resample); irq >= 0 || res >= 0 {
			a.extra = []int{irq, res}
		}
		for _, fd := range h.QEMU.Extra {
			a.extra = append(a.extra, tab.Take(fd))
		}
		a.state = h.QEMU.Session
	}
	m.adopted = append(m.adopted, a)
	if m.socketDir == "" {
		return nil
	}
	path := filepath.Join(m.socketDir, inst.uuid+m.transport.Suffix())
	if h.Listener == handover.None {
		a.fresh = true
		return m.listenLocked(inst) // the old process had none: a fresh one
	}
	l, err := unixListener(tab.Take(h.Listener), "instance listener")
	if err != nil {
		return err
	}
	inst.listener, inst.socket = l, path
	if h.Agent == nil {
		return m.listenAgentLocked(inst)
	}
	al, err := unixListener(tab.Take(h.Agent.Listener), "agent listener")
	if err != nil {
		return err
	}
	hd := agentchan.Handed{Listener: al, Unread: h.Agent.Unread, Watch: h.Agent.Watch}
	if h.Agent.Conn != handover.None {
		if hd.Conn, err = unixConn(tab.Take(h.Agent.Conn), "agent connection"); err != nil {
			al.Close()
			return err
		}
	}
	srv, err := agentchan.Adopt(m.agentConfig(inst), hd)
	if err != nil {
		al.Close()
		if hd.Conn != nil {
			hd.Conn.Close()
		}
		return err
	}
	inst.agent.Store(srv)
	return nil
}

// Start serves what the manager adopted (Config.Adopt): the workers, then
// each instance's QEMU connection, socket and agent channel. Before Start
// nothing is read from any of them.
func (m *Manager) Start() error {
	m.mu.Lock()
	adopted := m.adopted
	m.adopted = nil
	m.mu.Unlock()
	err := m.pool.Start()
	for _, a := range adopted {
		in := a.in
		in.mu.Lock()
		l := in.listener
		in.mu.Unlock()
		if a.conn != nil {
			pid := m.vmPID(in, a.conn) // 0 when unknown: the agent channel then takes any peer
			if c, aerr := m.transport.Adopt(a.conn, a.extra, a.state, in.Endpoint()); aerr != nil {
				// Adopt closed what it was given: the VM sees a hang-up
				// and its vGPU stays to be re-attached.
				err = errors.Join(err, fmt.Errorf("instance %s: %w", in.uuid, aerr))
			} else {
				done := make(chan struct{})
				in.mu.Lock()
				in.conn, in.connDone, in.connPID = c, done, pid
				in.mu.Unlock()
				kept := m.keeper.Keep(a.conn)
				m.wg.Add(1)
				go func() {
					defer m.wg.Done()
					defer m.keeper.Drop(kept)
					if err := in.serve(m.ctx, c, done); err != nil && !errors.Is(err, context.Canceled) {
						in.log.Warn("vm connection ended", "err", err)
					}
				}()
			}
		}
		if l != nil && !a.fresh {
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.acceptLoop(in, l)
			}()
		}
		if srv := in.agent.Load(); srv != nil && !a.fresh {
			m.serveAgent(in, srv)
			srv.Notify(in.be.Done() - 1) // a guest waiting for a completion looks again
		}
	}
	return err
}
