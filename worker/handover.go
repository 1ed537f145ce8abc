package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker/wire"
)

// ErrUpgrading is returned by calls to a worker while vgpud hands its
// workers to a new process (docs/upgrade.md).
var ErrUpgrading = errors.New("vgpud is being upgraded in place")

// errAdopted is what waiting for an adopted worker returns: it is not
// this process's child, so its exit status is not known here.
var errAdopted = errors.New("adopted worker ended")

// osProcess is a worker's operating-system process.
type osProcess interface {
	Pid() int
	Kill() error
	Wait() error // once, by the reaper
}

// childProcess is a worker this process started.
type childProcess struct{ cmd *exec.Cmd }

func (c childProcess) Pid() int    { return c.cmd.Process.Pid }
func (c childProcess) Kill() error { return c.cmd.Process.Signal(syscall.SIGKILL) }
func (c childProcess) Wait() error { return c.cmd.Wait() }

// adoptedProcess is a worker an earlier vgpud started and handed over: it
// is known by a pidfd, which stays valid whatever becomes of its PID.
type adoptedProcess struct {
	pid int
	fd  int
	mu  sync.Mutex
}

func (a *adoptedProcess) Pid() int { return a.pid }

func (a *adoptedProcess) Kill() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fd < 0 {
		return nil
	}
	return unix.PidfdSendSignal(a.fd, unix.SIGKILL, nil, 0)
}

// Wait waits until the process has ended (its pidfd turns readable).
func (a *adoptedProcess) Wait() error {
	fds := []unix.PollFd{{Fd: int32(a.fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for adopted worker %d: %w", a.pid, err)
		}
		if fds[0].Revents != 0 {
			break
		}
	}
	a.mu.Lock()
	unix.Close(a.fd)
	a.fd = -1
	a.mu.Unlock()
	return errAdopted
}

// pauseTick is how often Pause looks whether the workers went quiet.
const pauseTick = 200 * time.Microsecond

// Pause quiesces every worker for a handover: turns they ask for wait,
// those in progress end (bounded by the watchdog), each is told to
// outlive this process (wire.Parent), calls are refused from then on,
// and the readers stop between two messages. Resume undoes it. Nothing
// a worker sends is lost: what it asks for after the pause waits in its
// socket for whichever process serves it next.
func (p *Pool) Pause(ctx context.Context) error {
	if p.cfg.InProcess {
		return errors.New("instances run in vgpud's own process (-unsafe-in-process): their device state cannot be handed over")
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrPoolClosed
	}
	if len(p.starting) > 0 {
		p.mu.Unlock()
		return errors.New("a worker is starting; try again")
	}
	p.paused = true
	procs := p.procList()
	p.mu.Unlock()
	for _, pr := range procs {
		pr.mu.Lock()
		pr.deferTurn = true
		pr.mu.Unlock()
	}
	// Stopped workers could neither end their turns nor answer, and the
	// next process must not inherit a stopped one (preempt.go).
	for _, s := range p.scheds {
		s.SetPreempting(false)
		// No free turn is parked from now on; one taken already is in
		// progress until its worker gives it back.
		s.SetOffering(false)
	}
	// A turn taken from a parked offer is in its scheduler's books from
	// the revocation to its worker's claim (wire.TurnTaken), and in turns
	// from before the claim: once no scheduler holds one unclaimed (none
	// is taken any more), turns has them all.
	if err := waitUnclaimed(ctx, p.scheds); err != nil {
		return fmt.Errorf("wait for device turns in progress: %w", err)
	}
	// A turn is in turns from its request (nil while the scheduler has
	// not granted it) or its claim to its release.
	quiet := func(pr *process) bool { return len(pr.turns) == 0 }
	if err := waitAll(ctx, procs, quiet); err != nil {
		return fmt.Errorf("wait for device turns in progress: %w", err)
	}
	for _, pr := range procs {
		if _, err := pr.call(ctx, &wire.Parent{Arm: false}); err != nil && pr.ctx.Err() == nil {
			return fmt.Errorf("worker %d: %w", pr.os.Pid(), err)
		}
	}
	for _, pr := range procs {
		pr.mu.Lock()
		pr.noCalls = true
		pr.mu.Unlock()
	}
	if err := waitAll(ctx, procs, func(pr *process) bool { return len(pr.pending) == 0 }); err != nil {
		return fmt.Errorf("wait for calls in progress: %w", err)
	}
	past := time.Unix(1, 0)
	for _, pr := range procs {
		pr.mu.Lock()
		pr.pausing = true
		stop := pr.readStop
		pr.mu.Unlock()
		pr.conn.SetReadDeadline(past)
		pr.logs.SetReadDeadline(past)
		select {
		case <-stop:
		case <-pr.ctx.Done(): // it ended meanwhile: the new process sees it gone
		case <-ctx.Done():
			return fmt.Errorf("stop reading worker %d: %w", pr.os.Pid(), ctx.Err())
		}
		select {
		case <-pr.logStop:
		case <-pr.ctx.Done():
		case <-ctx.Done():
			return fmt.Errorf("stop relaying worker %d's log: %w", pr.os.Pid(), ctx.Err())
		}
	}
	for _, in := range p.instList() {
		in.pauseNotices()
	}
	return nil
}

// HandOver marks the paused pool as handed over to a new process (the
// old side's commit, docs/upgrade.md): its workers are the new process's.
// The pool forgets them and its instances; Close, retire and every later
// call stop, kill or send nothing.
func (p *Pool) HandOver() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handedOver = true
	p.closed = true
	p.procs = map[key]*process{}
	p.instances = map[string]*procInstance{}
}

// waitAll waits until cond holds for every live process (under its lock).
func waitAll(ctx context.Context, procs []*process, cond func(*process) bool) error {
	return waitUntil(ctx, func() bool {
		for _, pr := range procs {
			pr.mu.Lock()
			ok := pr.ctx.Err() != nil || cond(pr)
			pr.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
}

// waitUnclaimed waits until no scheduler of scheds holds a turn taken
// from a parked offer that its worker has not claimed.
func waitUnclaimed(ctx context.Context, scheds []*sched.Scheduler) error {
	return waitUntil(ctx, func() bool { return !slices.ContainsFunc(scheds, (*sched.Scheduler).Unclaimed) })
}

// waitUntil looks whether done holds every pauseTick until it does or
// ctx ends.
func waitUntil(ctx context.Context, done func() bool) error {
	for !done() {
		t := time.NewTimer(pauseTick)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Resume undoes Pause (the handover was abandoned): readers, log relays
// and notice relays run again, the deferred turns are served, and the
// workers die with this process again.
func (p *Pool) Resume() {
	p.mu.Lock()
	p.paused = false
	procs := p.procList()
	p.mu.Unlock()
	for _, s := range p.scheds {
		s.SetPreempting(true)
		s.SetOffering(true)
	}
	for _, in := range p.instList() {
		in.startNotices()
	}
	for _, pr := range procs {
		pr.conn.SetReadDeadline(time.Time{})
		pr.logs.SetReadDeadline(time.Time{})
		pr.mu.Lock()
		wasPaused := pr.pausing
		pr.pausing, pr.noCalls, pr.deferTurn = false, false, false
		deferred := pr.deferred
		pr.deferred = nil
		pr.mu.Unlock()
		if wasPaused && pr.ctx.Err() == nil {
			pr.startReader(pr.readDone)
			pr.startLogs(pr.logsDone)
		}
		pr.serveDeferred(deferred)
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		if _, err := pr.call(ctx, &wire.Parent{Arm: true}); err != nil && pr.ctx.Err() == nil {
			pr.log.Warn("worker may outlive vgpud: parent-death signal not armed again", "err", err)
		}
		cancel()
	}
}

// serveDeferred answers the turn requests that waited during a pause.
func (pr *process) serveDeferred(ts []handover.Turn) {
	for _, t := range ts {
		if err := pr.turn(t.ID, &wire.Turn{Turn: t.Turn, Slot: t.Slot, Kind: wire.TurnKind(t.Kind), Cost: time.Duration(t.Cost)}); err != nil {
			pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: %v", err))
			return
		}
	}
}

func (p *Pool) procList() []*process {
	out := make([]*process, 0, len(p.procs))
	for _, pr := range p.procs {
		out = append(out, pr)
	}
	return out
}

func (p *Pool) instList() []*procInstance {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*procInstance, 0, len(p.instances))
	for _, in := range p.instances {
		out = append(out, in)
	}
	return out
}

// Export describes the paused pool for a handover: its workers and
// domains, with their descriptors added to tab; instance fills the
// pool's part of an instance's record.
func (p *Pool) Export(tab *handover.Table) (ws []handover.Worker, ds []handover.Domain, instance func(id string, h *handover.Instance) error, err error) {
	p.mu.Lock()
	procs := p.procList()
	for name, d := range p.domains {
		ds = append(ds, handover.Domain{Name: name, Shared: d.shared, Budget: d.budget})
	}
	p.mu.Unlock()
	index := map[*process]int{}
	for _, pr := range procs {
		if pr.ctx.Err() != nil {
			continue // ended: its instances go over as lost
		}
		w, err := pr.export(tab)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("worker %d: %w", pr.os.Pid(), err)
		}
		index[pr] = len(ws)
		ws = append(ws, w)
	}
	instance = func(id string, h *handover.Instance) error {
		p.mu.Lock()
		in := p.instances[id]
		p.mu.Unlock()
		if in == nil {
			return fmt.Errorf("instance %s: not in the worker pool", id)
		}
		return in.export(tab, index, h)
	}
	return ws, ds, instance, nil
}

func (pr *process) export(tab *handover.Table) (handover.Worker, error) {
	pfd, err := unix.PidfdOpen(pr.os.Pid(), 0)
	if err != nil {
		return handover.Worker{}, fmt.Errorf("pidfd: %w", err)
	}
	defer unix.Close(pfd)
	w := handover.Worker{Domain: pr.key.domain, Device: pr.key.device, PID: pr.os.Pid(), Cache: pr.cache}
	if w.PIDFD, err = tab.Add(pfd); err != nil {
		return w, err
	}
	if w.Conn, err = tab.AddConn(pr.conn.Raw()); err != nil {
		return w, fmt.Errorf("protocol socket: %w", err)
	}
	if w.Log, err = tab.AddConn(pr.logs); err != nil {
		return w, fmt.Errorf("log pipe: %w", err)
	}
	w.Hello = pr.info.EncodeBody()
	pr.mu.Lock()
	w.NextID, w.NextSlot = pr.nextID, pr.nextSlot
	w.Turns = append([]handover.Turn(nil), pr.deferred...)
	pr.mu.Unlock()
	return w, nil
}

func (in *procInstance) export(tab *handover.Table, index map[*process]int, h *handover.Instance) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	var err error
	add := func(fd int) handover.FD {
		if err != nil {
			return handover.None
		}
		var d handover.FD
		d, err = tab.Add(fd)
		return d
	}
	h.Worker = -1
	if i, ok := index[in.proc]; ok && in.proc != nil {
		h.Worker, h.Slot = i, in.slot
	} else {
		h.Why = in.why
		if h.Why == "" {
			h.Why = "its worker ended during the upgrade"
		}
	}
	h.Page, h.Bell, h.Notify = add(in.pageFD), add(in.bellFD), add(int(in.notify.Fd()))
	for _, r := range in.regions {
		if r.Foreign {
			// A Xen privcmd fd: the handover state cannot say so, and a
			// Xen session blocks an upgrade in place anyway (docs/xen.md);
			// the new process's transport sends guest RAM again.
			continue
		}
		h.Regions = append(h.Regions, handover.Region{GPA: r.GPA, Size: r.Size, Offset: r.Offset, FD: add(r.FD)})
	}
	return err
}

// Adopt takes the workers and domains an old process handed over, with
// their descriptors from tab, into a new pool (before any Create); the
// instances are adopted by Create from insts. Nothing runs until Start.
func (p *Pool) Adopt(ws []handover.Worker, ds []handover.Domain, insts []handover.Instance, tab *handover.Table) error {
	if p.cfg.InProcess {
		return errors.New("adopt: an in-process pool has no workers to adopt")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.adopting = true
	for _, d := range ds {
		p.domains[d.Name] = &domainInfo{shared: d.Shared, budget: d.Budget}
	}
	p.adoptProcs = make([]*process, len(ws))
	for i, w := range ws {
		pr, err := p.adoptProcess(w, tab)
		if err != nil {
			return fmt.Errorf("adopt worker %d (domain %s): %w", w.PID, w.Domain, err)
		}
		k := pr.key
		if _, dup := p.procs[k]; dup {
			return fmt.Errorf("adopt worker %d: a second worker for domain %s on device %d", w.PID, k.domain, k.device)
		}
		p.procs[k] = pr
		p.adoptProcs[i] = pr
	}
	p.adoptInsts = map[string]handover.Instance{}
	for _, h := range insts {
		p.adoptInsts[h.UUID] = h
	}
	p.adoptTab = tab
	return nil
}

func (p *Pool) adoptProcess(w handover.Worker, tab *handover.Table) (*process, error) {
	if w.Device >= len(p.cfg.Devices) {
		return nil, fmt.Errorf("device %d of %d", w.Device, len(p.cfg.Devices))
	}
	info, err := wire.DecodeHelloReply(w.Hello)
	if err != nil {
		return nil, err
	}
	if info.Name != p.cfg.Devices[w.Device].Name {
		return nil, fmt.Errorf("it serves device %q, this vgpud's device %d is %q", info.Name, w.Device, p.cfg.Devices[w.Device].Name)
	}
	cf := os.NewFile(uintptr(tab.Take(w.Conn)), "worker-protocol")
	conn, err := wire.FileConn(cf)
	cf.Close()
	if err != nil {
		return nil, err
	}
	logs := os.NewFile(uintptr(tab.Take(w.Log)), "worker-stderr")
	if err := unix.SetNonblock(int(logs.Fd()), true); err != nil {
		conn.Close()
		logs.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := key{w.Domain, w.Device}
	pr := &process{
		pool: p, key: k, sched: p.scheds[k.device], os: &adoptedProcess{pid: w.PID, fd: tab.Take(w.PIDFD)}, conn: conn, logs: logs,
		log: p.log.With("domain", k.domain, "device", k.device, "worker_pid", w.PID),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), cache: w.Cache, info: info,
		pending: map[uint32]chan *wire.Reply{}, turns: map[uint32]func(time.Duration, uint32){},
		slots: map[uint32]*procInstance{}, nextID: w.NextID, nextSlot: w.NextSlot,
		deferTurn: true, deferred: w.Turns,
	}
	return pr, nil
}

// adoptInstance is Create for an instance handed over.
func (p *Pool) adoptInstance(cfg InstanceConfig, h handover.Instance) (*procInstance, error) {
	tab := p.adoptTab
	in := &procInstance{pool: p, cfg: cfg, limits: cfg.Limits, reuse: cfg.Reuse, pageFD: tab.Take(h.Page), bellFD: tab.Take(h.Bell)}
	nfd := tab.Take(h.Notify)
	if in.pageFD < 0 || in.bellFD < 0 || nfd < 0 {
		if nfd >= 0 {
			unix.Close(nfd)
		}
		in.free()
		return nil, fmt.Errorf("adopt instance %s: missing descriptors", cfg.ID)
	}
	// The worker may have left either eventfd blocking: the notice relay
	// waits in the runtime's poller, which only a non-blocking file
	// joins, and the doorbell is written by a Trigger (instance.go).
	if err := irqfd.Prepare(nfd); err != nil {
		unix.Close(nfd)
		in.free()
		return nil, fmt.Errorf("adopt instance %s: notify: %w", cfg.ID, err)
	}
	in.notify = os.NewFile(uintptr(nfd), "notify")
	bfd := in.bellFD
	in.bellFD = -1
	if err := in.ownBell(bfd); err != nil {
		in.free()
		return nil, fmt.Errorf("adopt instance %s: %w", cfg.ID, err)
	}
	var err error
	if in.page, err = unix.Mmap(in.pageFD, 0, abi.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		in.free()
		return nil, fmt.Errorf("adopt instance %s: map instance page: %w", cfg.ID, err)
	}
	unmapWhenUnreachable(in)
	if in.sh, err = aggregator.SharedIn(in.page, false); err != nil {
		in.free()
		return nil, fmt.Errorf("adopt instance %s: %w", cfg.ID, err)
	}
	for _, r := range h.Regions {
		in.regions = append(in.regions, guestmem.Region{GPA: r.GPA, Size: r.Size, Offset: r.Offset, FD: tab.Take(r.FD)})
	}
	if err := guestmem.Check(in.regions); err != nil {
		in.free()
		return nil, fmt.Errorf("adopt instance %s: %w", cfg.ID, err)
	}
	if h.Worker < 0 {
		in.lost, in.why = true, h.Why
		return in, nil
	}
	pr := p.adoptProcs[h.Worker]
	if pr.key.domain != cfg.Domain || pr.key.device != cfg.Device {
		in.free()
		return nil, fmt.Errorf("adopt instance %s: its worker serves domain %s on device %d, the instance is in %s on %d",
			cfg.ID, pr.key.domain, pr.key.device, cfg.Domain, cfg.Device)
	}
	if _, dup := pr.slots[h.Slot]; dup || h.Slot == 0 || h.Slot > pr.nextSlot {
		in.free()
		return nil, fmt.Errorf("adopt instance %s: slot %d of its worker taken or never given", cfg.ID, h.Slot)
	}
	pr.slots[h.Slot] = in
	in.proc, in.slot = pr, h.Slot
	// The worker holds the instance's buffers already: the new ledger
	// starts from what the instance page says (the worker's own count,
	// bounded by the quota).
	p.mem[cfg.Device].Set(cfg.ID, min(in.sh.MemUsed.Load(), cfg.Limits.MemBytes))
	return in, nil
}

// Start runs what Adopt took over: each worker's reader, log relay and
// reaper, the instances' notice relays, the turns that waited, and the
// limits and budgets as the new process sees them. Instances handed over
// that no Create adopted are an error (their descriptors are closed).
func (p *Pool) Start() error {
	p.mu.Lock()
	if !p.adopting {
		p.mu.Unlock()
		return nil
	}
	p.adopting = false
	procs := p.adoptProcs
	p.adoptProcs = nil
	var left []string
	for id := range p.adoptInsts {
		left = append(left, id)
	}
	p.adoptInsts = nil
	tab := p.adoptTab
	p.adoptTab = nil
	insts := make([]*procInstance, 0, len(p.instances))
	for _, in := range p.instances {
		insts = append(insts, in)
	}
	p.mu.Unlock()
	if tab != nil {
		tab.Close()
	}
	for _, in := range insts {
		in.startNotices()
	}
	for _, pr := range procs {
		pr.mu.Lock()
		deferred := pr.deferred
		pr.deferred, pr.deferTurn = nil, false
		idle := len(pr.slots) == 0
		pr.mu.Unlock()
		pr.run()
		pr.serveDeferred(deferred)
		if idle {
			p.retire(pr)
		}
	}
	for _, in := range insts {
		in.mu.Lock()
		lim, pr, slot := in.limits, in.proc, in.slot
		in.mu.Unlock()
		p.schedLimits(in.cfg.Device, in.cfg.ID, in.cfg.Domain, lim)
		in.publishLimits(lim)
		if pr != nil {
			if _, err := pr.call(context.Background(), &wire.Quota{Slot: slot, Limits: wireLimits(lim)}); err != nil {
				pr.log.Warn("adopted instance: limits not sent", "instance", in.cfg.ID, "err", err)
			}
		}
	}
	p.mu.Lock()
	budgets := map[string]int64{}
	for name, d := range p.domains {
		budgets[name] = d.budget
	}
	p.mu.Unlock()
	for name, b := range budgets {
		if b > 0 {
			p.SetBudget(name, b)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("instances handed over but not in the state file, dropped: %v", left)
	}
	return nil
}
