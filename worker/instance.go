package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/worker/wire"
)

// procInstance is an instance whose device state lives in a worker
// process: the main process keeps its instance page (mapped here and in
// the worker), its doorbell and notify eventfds and copies of its
// guest-RAM fds, so that it can bring the instance back on a fresh worker
// after the old one ended.
//
// The eventfds' open files are shared with the worker, an untrusted peer
// that may clear their O_NONBLOCK and fill or empty their counters: no
// goroutine of the main process that holds a lock, or that the guest's
// register path, a pause, Close or shutdown waits for, writes or reads
// them in a way that can block (docs/worker.md).
type procInstance struct {
	pool *Pool
	cfg  InstanceConfig

	page   []byte // the instance page (a sealed memfd), mapped
	sh     *aggregator.Shared
	pageFD int
	bell   *irqfd.Trigger // owns bellFD and writes it from its goroutine
	bellFD int            // eventfd: main signals after publishing a tail
	notify *os.File       // eventfd: the worker signals after completions
	noteWG sync.WaitGroup

	mu sync.Mutex
	// Guarded by mu.
	limits  Limits
	reuse   bool
	proc    *process // nil while lost or closed
	slot    uint32
	lost    bool
	why     string
	regions []guestmem.Region // the guest-RAM map; its fds are this instance's copies
	closed  bool
	// A relocation in progress (realloc.go): moving is closed when it
	// ends, stopMove cancels it, view is what the guest reads meanwhile.
	moving   chan struct{}
	stopMove context.CancelFunc
	view     ringView

	bellsLive bool // the relocation rang the last doorbell: ring again

	// logging is the worker whose slot logSlot keeps the write log of
	// the instance's guest RAM (GuestLog), nil while off.
	logging *process
	logSlot uint32

	// lastBell is the guest's last doorbell (a tail) or kick (a shadow
	// address, with kickBit set), replayed after a relocation; bellMu
	// orders the doorbells and the replay.
	bellMu   sync.Mutex
	lastBell atomic.Uint64
	// ctxPending: the device contexts kicked while the instance was being
	// moved (bit id-1), rung again on the worker it lands on.
	ctxPending atomic.Uint64

	// The transport's kick eventfd (kicks.go); kickMu orders who reads
	// it: the worker kickAt (its slot kickSlot), or this process's
	// watcher kickW. kickShadow is the tail shadow's address as the
	// guest programmed it (trusted: written by the register file only).
	kickMu     sync.Mutex
	kickFD     int
	kickAt     *process
	kickSlot   uint32
	kickW      *irqfd.Watcher
	kickShadow atomic.Uint64
}

// In procInstance.lastBell: kickBit marks a kick, bellBit any doorbell
// (0: none since the ring was last enabled).
const (
	kickBit = 1 << 63
	bellBit = 1 << 62
)

var _ Backend = (*procInstance)(nil)

func newProcInstance(p *Pool, cfg InstanceConfig) (*procInstance, error) {
	in := &procInstance{pool: p, cfg: cfg, limits: cfg.Limits, reuse: cfg.Reuse, pageFD: -1, bellFD: -1, kickFD: -1}
	var err error
	defer func() {
		if err != nil {
			in.free()
		}
	}()
	// Sealed: a worker that truncated the page would make this process's
	// reads of it fault.
	if in.pageFD, err = guestmem.NewSealed("vgpud-instance-"+cfg.ID, abi.PageSize); err != nil {
		return nil, err
	}
	if in.page, err = unix.Mmap(in.pageFD, 0, abi.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("map instance page: %w", err)
	}
	if in.sh, err = aggregator.SharedIn(in.page, true); err != nil {
		return nil, err
	}
	unmapWhenUnreachable(in)
	bfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("doorbell eventfd: %w", err)
	}
	if err = in.ownBell(bfd); err != nil {
		return nil, err
	}
	nfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("notify eventfd: %w", err)
	}
	in.notify = os.NewFile(uintptr(nfd), "notify")
	in.startNotices()
	return in, nil
}

// unmapWhenUnreachable unmaps the instance page once the instance cannot be
// reached: its counters are read (metrics, stats) with no lock against
// Close, so the page stays mapped as long as the instance can be.
func unmapWhenUnreachable(in *procInstance) {
	runtime.AddCleanup(in, func(page []byte) { _ = unix.Munmap(page) }, in.page)
}

// ownBell makes fd, an eventfd, the instance's doorbell, written by a
// Trigger of its own (closed by free). On error fd is closed.
func (in *procInstance) ownBell(fd int) error {
	t, err := irqfd.New(fd, in.pool.log.With("instance", in.cfg.ID, "eventfd", "doorbell"))
	if err != nil {
		return fmt.Errorf("doorbell eventfd: %w", err)
	}
	in.bell, in.bellFD = t, fd
	return nil
}

// startNotices starts relaying the worker's completion notices.
func (in *procInstance) startNotices() {
	in.notify.SetReadDeadline(time.Time{})
	in.noteWG.Add(1)
	go in.notices()
}

// pauseNotices stops the relay between two notices (a handover); a
// notice that comes meanwhile waits in the eventfd.
func (in *procInstance) pauseNotices() {
	in.notify.SetReadDeadline(time.Unix(1, 0))
	in.noteWG.Wait()
}

// notices relays the worker's completion notices to the Notify hook. It
// waits in the runtime's poller, which a read deadline (pauseNotices) or
// Close ends, and reads the counter only with irqfd.Drain, which never
// blocks: a worker that cleared the eventfd's O_NONBLOCK would otherwise
// hold the relay in a read(2) that neither ends, and Close (which waits
// for reads in progress on a non-blocking os.File) with it.
func (in *procInstance) notices() {
	defer in.noteWG.Done()
	rc, err := in.notify.SyscallConn()
	if err != nil {
		in.pool.log.Error("notice relay", "instance", in.cfg.ID, "err", err)
		return
	}
	for {
		var n uint64
		var derr error
		err := rc.Read(func(fd uintptr) bool {
			n, derr = irqfd.Drain(int(fd))
			return derr != nil || n > 0 // else: wait until readable
		})
		if err != nil {
			return // closed, or paused by the read deadline
		}
		if derr != nil {
			in.pool.log.Error("notice relay", "instance", in.cfg.ID, "err", derr)
			return
		}
		if in.cfg.Notify != nil {
			in.cfg.Notify(in.sh.Done.Load() - 1)
		}
	}
}

// attach adds the instance to its domain's worker (starting one if
// needed) and sends its guest-RAM map.
func (in *procInstance) attach() error {
	in.mu.Lock()
	k := key{in.cfg.Domain, in.cfg.Device}
	in.mu.Unlock()
	pr, err := in.pool.processFor(k)
	if err != nil {
		return err
	}
	pr.mu.Lock()
	pr.nextSlot++
	slot := pr.nextSlot
	pr.slots[slot] = in
	pr.mu.Unlock()
	in.mu.Lock()
	lim, reuse := in.limits, in.reuse
	in.mu.Unlock()
	// A doorbell rung while the last worker was dying is still counted in
	// the eventfd (or about to be): it belongs to a ring that worker took
	// with it, and would reach the fresh worker before the guest's reset
	// enabled a new one (and latch an error in the middle of the guest
	// reopening). Drain never blocks, whatever the last worker left of
	// the eventfd's flags; a write it had blocked goes on once this
	// read empties the counter (that one write may then still reach the
	// fresh worker: an error only this instance sees).
	in.bell.Discard()
	if _, err := irqfd.Drain(in.bellFD); err != nil {
		in.pool.log.Warn("doorbell eventfd: stale count not read", "instance", in.cfg.ID, "err", err)
	}
	if _, err := pr.call(context.Background(), &wire.Add{Slot: slot, ID: in.cfg.ID, Reuse: reuse, Limits: wireLimits(lim), Contexts: lim.Contexts},
		in.pageFD, in.bellFD, int(in.notify.Fd())); err != nil {
		pr.mu.Lock()
		delete(pr.slots, slot)
		pr.mu.Unlock()
		in.pool.retire(pr)
		return err
	}
	in.publishLimits(lim)
	in.sh.KickShadow.Store(in.kickShadow.Load()) // the worker's Add cleared the page
	in.mu.Lock()
	in.proc, in.slot, in.lost, in.why = pr, slot, false, ""
	regions := in.regions
	in.mu.Unlock()
	// A worker that ended between its reply and the lines above was
	// reaped while the instance was not yet bound to it, so the reaper's
	// lose passed it by: lose it here (the reaper cancels ctx before it
	// loses its instances, so one of the two sees it).
	if pr.ctx.Err() != nil {
		in.lose(pr, "the worker ended as the instance was added")
		return nil
	}
	if len(regions) > 0 {
		if err := in.sendMemory(pr, slot, regions); err != nil {
			return err
		}
	}
	in.routeKicks()
	return nil
}

func wireLimits(l Limits) wire.Limits {
	return wire.Limits{MemBytes: l.MemBytes, ProgramBytes: l.ProgramBytes, ComputeUnits: l.ComputeUnits, Profile: l.Profile}
}

// bound returns the instance's worker and slot, or an error when the
// instance is lost or closed.
func (in *procInstance) bound() (*process, uint32, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.moving != nil && !in.closed {
		// A relocation: wait for the instance to land.
		ch := in.moving
		in.mu.Unlock()
		<-ch
		in.mu.Lock()
	}
	switch {
	case in.closed:
		return nil, 0, aggregator.ErrClosed
	case in.proc == nil:
		return nil, 0, abi.Errorf(abi.StatusDeviceLost, "instance %s: %v: %s", in.cfg.ID, ErrLost, in.why)
	}
	return in.proc, in.slot, nil
}

// ABIFeatures is abi.Features less what the instance's worker does not
// understand (mmio.Featured): a worker of an earlier release, adopted in
// an upgrade in place, without wire.FeatureImages takes neither image
// arguments nor device-info version 2, so the guest is not told of
// images; without wire.FeatureIL it takes no SPIR-V, so the guest is not
// told of that, nor of images made from buffers without
// wire.FeatureImageBuffers. It never waits: with no worker bound (a relocation, a
// lost worker) it reports this release's, which every worker it starts
// has.
func (in *procInstance) ABIFeatures() uint32 {
	in.mu.Lock()
	pr := in.proc
	in.mu.Unlock()
	f := uint32(abi.Features)
	if pr == nil {
		return f
	}
	if pr.info.Features&wire.FeatureImages == 0 {
		f &^= abi.FeatureImages
	}
	if pr.info.Features&wire.FeatureIL == 0 {
		f &^= abi.FeatureIL
	}
	if pr.info.Features&wire.FeatureImageBuffers == 0 {
		f &^= abi.FeatureImageBuffers
	}
	return f
}

// lose is called by the reaper of pr: the instance's device context is
// gone with its worker.
func (in *procInstance) lose(pr *process, why string) {
	in.mu.Lock()
	if in.proc != pr {
		in.mu.Unlock()
		return
	}
	in.proc, in.lost, in.why = nil, true, why
	dev := in.cfg.Device
	in.mu.Unlock()
	in.pool.mem[dev].Forget(in.cfg.ID)
	in.sh.Enabled.Store(0)
	in.sh.Latch(abi.StatusDeviceLost)
	in.pool.log.Warn("instance lost its device context", "instance", in.cfg.ID, "reason", why)
	in.routeKicks()
	if in.cfg.Notify != nil {
		in.cfg.Notify(in.sh.Done.Load() - 1) // a guest waiting is woken to look
	}
}

// revive brings a lost instance back on a (fresh) worker of its domain.
func (in *procInstance) revive() error {
	in.mu.Lock()
	if !in.lost || in.closed {
		in.mu.Unlock()
		return nil
	}
	in.mu.Unlock()
	if err := in.attach(); err != nil {
		in.sh.Latch(abi.StatusDeviceLost)
		return err
	}
	in.pool.log.Info("instance back on a fresh worker", "instance", in.cfg.ID)
	return nil
}

func (in *procInstance) call(m wire.Msg, fds ...int) error {
	pr, _, err := in.bound()
	if err != nil {
		return err
	}
	_, err = pr.call(context.Background(), m, fds...)
	return err
}

// Limits is what the guest reads of its share of the device.
func (in *procInstance) Limits() mmio.Limits {
	in.mu.Lock()
	lim, dev := in.limits, in.cfg.Device
	in.mu.Unlock()
	info := in.pool.cfg.Devices[dev]
	maxAlloc := lim.MemBytes
	if info.MaxAllocBytes != 0 && info.MaxAllocBytes < maxAlloc {
		maxAlloc = info.MaxAllocBytes
	}
	cus := lim.ComputeUnits
	if cus == 0 || cus > info.ComputeUnits {
		cus = info.ComputeUnits
	}
	return mmio.Limits{MemBytes: lim.MemBytes, MaxAlloc: maxAlloc, ComputeUnits: cus,
		MaxWorkGroup: uint32(min(info.MaxWorkGroupSize, 1<<31)), ProfileName: lim.Profile, DeviceName: info.Name,
		Contexts: min(lim.Contexts, abi.MaxContexts)}
}

func (in *procInstance) EnableRing(c mmio.RingConfig) error {
	in.lastBell.Store(0)
	pr, slot, err := in.bound()
	if err != nil {
		return err
	}
	// The poll word travels in the page, which a worker that predates it
	// ignores (aggregator.Shared.RingPollWord).
	in.sh.RingShadow.Store(c.Shadow)
	in.sh.RingPollWord.Store(c.PollWord)
	_, err = pr.call(context.Background(), &wire.Enable{Slot: slot, Base: c.Base, ComplBase: c.ComplBase, Slots: c.Slots})
	return err
}

func (in *procInstance) DisableRing() {
	if pr, slot, err := in.bound(); err == nil {
		_, _ = pr.call(context.Background(), &wire.Disable{Slot: slot})
	}
}

func (in *procInstance) RingEnabled() bool {
	if v, ok := in.viewing(); ok {
		return v.enabled
	}
	return in.sh.Enabled.Load() == 1 && !in.Lost()
}

// Doorbell publishes tail in the instance page and signals the worker.
// While the instance is being relocated the doorbell is only recorded:
// the relocation replays the last one where the instance lands.
func (in *procInstance) Doorbell(tail uint32) error {
	in.bellMu.Lock()
	defer in.bellMu.Unlock()
	in.lastBell.Store(uint64(tail) | bellBit)
	if moving, err := in.ringable(); moving || err != nil {
		return err
	}
	return in.ring(false, uint64(tail))
}

// ringable reports whether the instance is being relocated, or why its
// doorbell cannot ring.
func (in *procInstance) ringable() (moving bool, err error) {
	in.mu.Lock()
	if in.moving != nil {
		live := in.bellsLive
		in.mu.Unlock()
		if !live {
			return true, nil
		}
		// Before the freeze or after the landing: ring the worker the
		// instance is on now, without waiting for the relocation (which
		// takes bellMu, held by the caller).
		_, _, err = in.current()
		return false, err
	}
	in.mu.Unlock()
	_, _, err = in.bound()
	return false, err
}

// ring publishes a tail (or, kick, a tail shadow's address) in the
// instance page and signals the worker. It never blocks, whatever the
// worker did to the doorbell eventfd: the write is the bell Trigger's,
// in its own goroutine (a write that fails is its to log; a full counter
// has a doorbell pending anyway), so ring has no error to return; its
// callers hold bellMu and the register file's locks.
func (in *procInstance) ring(kick bool, v uint64) error {
	if kick {
		in.sh.Shadow.Store(v)
		in.sh.Kick.Store(1)
	} else {
		in.sh.Tail.Store(uint32(v))
		in.sh.Kick.Store(0)
	}
	in.sh.Rung.Store(1)
	in.signal()
	return nil
}

// signal wakes the worker after a doorbell or kick was stored in the
// instance page, unless a loop of the instance is polling the page
// (aggregator.Shared.PollUntil): it finds it without a wake-up.
func (in *procInstance) signal() {
	if in.sh.Polling() {
		in.sh.Polled.Add(1)
		return
	}
	in.sh.Signals.Add(1)
	in.bell.Signal()
}

// Kick publishes the tail shadow's address in the instance page and
// signals the worker, which reads the tail from guest RAM.
func (in *procInstance) Kick(shadow uint64) error {
	in.bellMu.Lock()
	defer in.bellMu.Unlock()
	in.lastBell.Store(shadow&^(kickBit|bellBit) | kickBit | bellBit)
	if moving, err := in.ringable(); moving || err != nil {
		return err
	}
	return in.ring(true, shadow)
}

// ContextKick marks device context id kicked in the instance page and
// signals the worker, which reads the context's tail from its shadow.
// While the instance is being moved the kick is only recorded: the move
// rings it on the worker the instance lands on (a context's kick reads
// its tail from guest RAM, so ringing it again is harmless).
func (in *procInstance) ContextKick(id uint32) error {
	if id == 0 || id > abi.MaxContexts {
		return abi.Errorf(abi.StatusNotFound, "context %d", id)
	}
	in.bellMu.Lock()
	defer in.bellMu.Unlock()
	if moving, err := in.ringable(); err != nil {
		return err
	} else if moving {
		in.ctxPending.Or(1 << (id - 1))
		return nil
	}
	in.sh.CtxKicks.Or(1 << (id - 1))
	in.signal()
	return nil
}

func (in *procInstance) Head() uint32 {
	if v, ok := in.viewing(); ok {
		return v.head
	}
	return in.sh.Head.Load()
}

func (in *procInstance) Done() uint32 {
	if v, ok := in.viewing(); ok {
		return v.done
	}
	return in.sh.Done.Load()
}

// Reset resets the instance; a lost one is brought back on a fresh worker.
func (in *procInstance) Reset() {
	in.lastBell.Store(0)
	if in.Lost() {
		if err := in.revive(); err != nil {
			in.pool.log.Error("instance reset: no fresh worker", "instance", in.cfg.ID, "err", err)
		}
		return
	}
	pr, slot, err := in.bound()
	if err != nil {
		return
	}
	if _, err := pr.call(context.Background(), &wire.Reset{Slot: slot}); err != nil {
		in.pool.log.Warn("instance reset", "instance", in.cfg.ID, "err", err)
	}
}

func (in *procInstance) Error() (abi.Status, uint32) {
	if v, ok := in.viewing(); ok {
		return v.err, v.errCount
	}
	return in.sh.Error()
}
func (in *procInstance) LatchError(s abi.Status) {
	if s != abi.StatusOK {
		in.sh.Latch(s)
	}
}
func (in *procInstance) AckError() { in.sh.ErrStatus.Store(uint32(abi.StatusOK)) }

// Update checks the regions (sealed fds, inside their files), keeps them
// for a fresh worker, and sends copies to the worker.
func (in *procInstance) Update(regions []guestmem.Region) error {
	if len(regions) > wire.MaxRegions {
		closeRegions(regions)
		return abi.Errorf(abi.StatusBadAddress, "%d guest RAM regions, at most %d", len(regions), wire.MaxRegions)
	}
	if err := guestmem.Check(regions); err != nil {
		closeRegions(regions)
		in.pool.log.Error("guest RAM refused", "instance", in.cfg.ID, "err", err)
		return err
	}
	in.mu.Lock()
	old := in.regions
	in.regions = regions
	pr, slot := in.proc, in.slot
	in.mu.Unlock()
	closeRegions(old)
	if pr == nil {
		return nil // sent when a worker takes the instance
	}
	return in.sendMemory(pr, slot, regions)
}

func (in *procInstance) sendMemory(pr *process, slot uint32, regions []guestmem.Region) error {
	if len(regions) > 0 && regions[0].Foreign {
		// Xen: one privcmd fd restricted to the domain, and its windows
		// (guestmem.Check made them all foreign, of one domain).
		f := &wire.Foreign{Slot: slot, Domain: uint32(regions[0].Domain)}
		for _, r := range regions {
			f.Regions = append(f.Regions, wire.ForeignRegion{GPA: r.GPA, Size: r.Size})
		}
		_, err := pr.call(context.Background(), f, regions[0].FD)
		return err
	}
	m := &wire.Memory{Slot: slot}
	fds := make([]int, len(regions))
	for i, r := range regions {
		m.Regions = append(m.Regions, wire.Region{GPA: r.GPA, Size: r.Size, Offset: r.Offset})
		fds[i] = r.FD
	}
	_, err := pr.call(context.Background(), m, fds...)
	return err
}

func closeRegions(regions []guestmem.Region) {
	for _, r := range regions {
		if r.FD >= 0 {
			unix.Close(r.FD)
		}
	}
}

// Shared is valid as long as the instance is referenced (the page is
// unmapped once it can no longer be reached).
func (in *procInstance) Shared() *aggregator.Shared { return in.sh }

func (in *procInstance) SetLimits(l Limits) error {
	in.mu.Lock()
	old := in.limits
	l.Contexts = old.Contexts // fixed for the instance's life
	in.limits = l
	pr, slot, dev := in.proc, in.slot, in.cfg.Device
	in.mu.Unlock()
	in.pool.schedLimits(dev, in.cfg.ID, in.cfg.Domain, l)
	in.pool.mu.Lock()
	adopting := in.pool.adopting
	in.pool.mu.Unlock()
	if pr == nil || adopting { // adopting: Start sends them
		return nil
	}
	if _, err := pr.call(context.Background(), &wire.Quota{Slot: slot, Limits: wireLimits(l)}); err != nil {
		in.mu.Lock()
		in.limits = old
		in.mu.Unlock()
		in.pool.schedLimits(dev, in.cfg.ID, in.cfg.Domain, old)
		return err
	}
	in.publishLimits(l)
	return nil
}

// publishLimits writes the time limits the worker bounds its executors'
// calls by into the instance page (aggregator.Shared.KernelLimit); the
// worker clears the page when the instance is added, so after that.
func (in *procInstance) publishLimits(l Limits) {
	in.sh.KernelLimit.Store(int64(max(l.KernelTimeout, 0)))
	in.sh.BuildLimit.Store(int64(max(l.BuildTimeout, 0)))
	in.sh.PollWindow.Store(int64(in.pool.cfg.pollWindow()))
}

// limitsNow returns the instance's limits.
func (in *procInstance) limitsNow() Limits {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.limits
}

func (in *procInstance) SetReuse(on bool) error {
	in.mu.Lock()
	in.reuse = on
	pr, slot := in.proc, in.slot
	in.mu.Unlock()
	if pr == nil {
		return nil
	}
	_, err := pr.call(context.Background(), &wire.Reuse{Slot: slot, On: on})
	return err
}

func (in *procInstance) Domain() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cfg.Domain
}

// Move leaves the current worker (refused while the instance holds
// device objects) and joins the new domain's.
func (in *procInstance) Move(domain string, shared bool) error {
	if err := in.pool.declare(domain, shared); err != nil {
		return err
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return aggregator.ErrClosed
	}
	pr, slot := in.proc, in.slot
	in.mu.Unlock()
	if pr != nil {
		if _, err := pr.call(context.Background(), &wire.Remove{Slot: slot, IfEmpty: true}); err != nil && !errors.Is(err, ErrLost) {
			return fmt.Errorf("move to domain %s: %w", domain, err)
		}
		pr.mu.Lock()
		delete(pr.slots, slot)
		pr.mu.Unlock()
		in.pool.retire(pr)
		in.pool.mem[pr.key.device].Forget(in.cfg.ID)
	}
	in.mu.Lock()
	in.cfg.Domain, in.cfg.Shared = domain, shared
	in.proc, in.lost, in.why = nil, true, "moving to domain "+domain
	in.mu.Unlock()
	in.sh.Enabled.Store(0)
	return in.attach()
}

func (in *procInstance) Lost() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lost
}

// Close removes the instance from its worker (stopping the worker if it
// was the last) and frees what the main process held for it.
func (in *procInstance) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	if in.moving != nil {
		// A relocation in progress gives up and puts nothing back.
		stop, moving := in.stopMove, in.moving
		in.mu.Unlock()
		stop()
		<-moving
		in.mu.Lock()
	}
	pr, slot, dev := in.proc, in.slot, in.cfg.Device
	in.proc = nil
	in.mu.Unlock()
	_ = in.TakeKicks(-1) // every reader stopped, this process's copy closed
	defer in.pool.mem[dev].Forget(in.cfg.ID)
	var err error
	if pr != nil {
		// A worker busy with a kernel that never ends (its turn budget
		// may be long) would hold the close, and a stopping vgpud, for
		// ever: it gets stopGrace to answer, then it is ended.
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		_, err = pr.call(ctx, &wire.Remove{Slot: slot})
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			pr.kill(CauseWatchdog, fmt.Sprintf("did not remove instance %s within %v", in.cfg.ID, stopGrace))
			err = nil
		}
		pr.mu.Lock()
		delete(pr.slots, slot)
		pr.mu.Unlock()
		in.pool.retire(pr)
		if errors.Is(err, ErrLost) {
			err = nil // its worker ended meanwhile: nothing left to free there
		}
	}
	in.pool.mu.Lock()
	if in.pool.instances[in.cfg.ID] == in {
		delete(in.pool.instances, in.cfg.ID)
	}
	in.pool.mu.Unlock()
	in.pool.pages.CompareAndDelete(in.cfg.ID, in)
	in.pool.scheds[dev].Remove(in.cfg.ID)
	in.free()
	if pr != nil {
		in.unblockBellAfter(pr)
	}
	return err
}

// unblockBellAfter ends the doorbell's writer if it is still blocked
// after free: free's Close read the counter once, but the worker (which
// keeps its copy of the eventfd) may have filled it again before the
// writer retried. Once the worker has ended no one refills it, so a
// goroutine waits for that end and reads the counter once more; it ends
// with the worker or the writer, whichever ends first.
func (in *procInstance) unblockBellAfter(pr *process) {
	bell := in.bell
	select {
	case <-bell.Done():
		return
	default:
	}
	go func() {
		select {
		case <-bell.Done():
		case <-pr.done:
			bell.Unblock()
		}
	}()
}

// free releases the main process's resources of the instance.
func (in *procInstance) free() {
	if in.notify != nil {
		in.notify.Close()
		in.noteWG.Wait()
	}
	if in.bell != nil {
		// Close does not wait for a write the worker blocked (it reads
		// the counter to let it end): the fd is closed when it ends.
		in.bell.Close()
		in.bellFD = -1
	} else if in.bellFD >= 0 {
		unix.Close(in.bellFD)
		in.bellFD = -1
	}
	in.mu.Lock()
	regions := in.regions
	in.regions = nil
	in.mu.Unlock()
	closeRegions(regions)
	if in.pageFD >= 0 {
		unix.Close(in.pageFD)
		in.pageFD = -1
	}
}
