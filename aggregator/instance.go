package aggregator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

// InstanceConfig describes a vGPU instance to place on a Device.
type InstanceConfig struct {
	ID       string // unique on the device (the instance UUID)
	Profile  string // profile name shown to the guest
	MemBytes uint64 // device memory quota
	// ProgramBytes bounds the programs held (source, options, binaries);
	// 0: no bound.
	ProgramBytes uint64
	// MaxAlloc bounds one buffer; 0 means min(MemBytes, the device's limit).
	MaxAlloc     uint64
	ComputeUnits uint32 // 0 means the device's
	Memory       GuestMemory
	Logger       *slog.Logger
	// Notify, if set, is called by the worker after each completion record
	// is visible in guest RAM (the hook for interrupts and notifications),
	// with its index; for a batch of pipelined launches, whose records are
	// written back to back, once after the last with the last's index
	// (every record up to it is visible). It must not block.
	Notify func(index uint32)
	// Shared, if set, is where the instance keeps its register-visible
	// state and counters (a page shared with another process); nil: a new
	// one on the heap. It is initialised here.
	Shared *Shared
	// Contexts is the most device contexts (ABI 1.5) the guest may make
	// besides the default one, 0..abi.MaxContexts (more is taken as the
	// most).
	Contexts uint32
	// OpenContext opens the physical device anew for device context id:
	// a context of its own, in which only that context's buffers are
	// reachable (on a CPU device a process of its own, on a GPU an
	// OpenCL context of its own; docs/isolation.md "Device contexts").
	// The instance closes what it returns when the context ends. nil:
	// contexts take queues of the instance's own device, which isolates
	// their handles but not their kernels (tests, the in-process
	// baseline).
	// mem is what the context may hold: its executor's memory bound is
	// made from it.
	OpenContext func(id uint32, mem ContextMemory) (gpu.Device, error)
	// TurnHold is how long a device turn may be kept across consecutive
	// commands of the ring (turns.go "Many commands per turn"): 0 means
	// DefaultTurnHold, a negative value one turn per command.
	TurnHold time.Duration
}

// Limits are what the guest sees of its share of the device.
type Limits struct {
	MemBytes     uint64
	MaxAlloc     uint64
	ComputeUnits uint32
	MaxWorkGroup uint32
	Profile      string
	DeviceName   string
}

// ContextMemory is what a device context may hold, for OpenContext: the
// device bytes of its buffers (its own limit, or the instance's quota
// when it has none) and the bytes of the instance's programs, both as
// they are when the context is made.
type ContextMemory struct {
	Device   uint64
	Programs uint64
}

// RingConfig is the guest's ring programming.
type RingConfig struct {
	Base      uint64
	ComplBase uint64
	Slots     uint32
	// Shadow and PollWord (ABI 1.6, abi.FeatureNotify): the tail shadow
	// the ring loop reads while it polls, and the 8-byte poll word in
	// which it tells the guest so (notify.go); 0 and 0: none.
	Shadow   uint64
	PollWord uint64
}

// Instance is one vGPU's device state and its worker goroutine.
type Instance struct {
	id string
	// schedID is the id turns and memory are asked for under: the
	// instance's, for its device contexts too (they share its share).
	schedID string
	dev     *Device
	mem     GuestMemory
	queue   gpu.Queue
	limits  Limits // fixed at creation but for the quota below
	devInfo deviceInfoBlobs
	// memBytes and maxAlloc are the live quota (SetProfile); progBytes the
	// live program quota (SetProgramBytes).
	memBytes, maxAlloc, progBytes atomic.Uint64
	devMaxAlloc                   uint64 // the physical device's largest allocation
	log                           *slog.Logger
	notify                        func(index uint32)

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	done   chan struct{} // closed when the worker exits

	sh *Shared // register-visible state and counters

	poll func() // applies what the instance page holds (poll.go); guarded by mu

	shadowMu sync.Mutex // serialises PollShadow (notify.go)

	mu sync.Mutex
	// Guarded by mu.
	ring       RingConfig
	enabled    bool
	epoch      uint64 // bumped by Reset and EnableRing; stale work is dropped
	head       uint32 // commands fetched
	tail       uint32 // producer index published by the guest
	completed  uint32 // commands completed
	resetState bool   // the worker must free all handles before fetching
	closed     bool
	frozen     bool   // a migration holds the ring: doorbells are taken, nothing is fetched (migrate.go)
	pollWordOn bool   // the guest's poll word says polling (notify.go)
	shadowSeen uint32 // the tail shadow's value at the last look (notify.go)

	// Owned by the worker goroutine.
	state    *state
	curEpoch uint64    // epoch of the command being executed
	staging  []byte    // bounce buffer of copies, stagingChunk bytes once used
	noStream bool      // the queue refused to stream copies (gpu.Streamer): do not ask again
	lengths  lengths   // how long its kernels and copies take
	gen      uint64    // last buffer generation handed out (touch)
	mig      *migState // what earlier migration rounds sent; nil: none
	held     *heldTurn // the device turn kept across commands (turns.go); nil: none
	hold     time.Duration
	maxKeep  time.Duration // how long a kept turn may be renewed for (turns.go)
	cur      fetched       // the command being executed
	pending  []pipelined   // launches enqueued and not yet completed (pipeline.go)

	tasks chan func() // run by the worker between commands (onWorker)

	// Device contexts (context.go). For the default context: the most it
	// may make and how it opens their devices; ctxMu guards contexts.
	maxContexts uint32
	openContext func(id uint32, mem ContextMemory) (gpu.Device, error)
	ctxMu       sync.Mutex
	contexts    map[uint32]*Instance
	// For a device context: the default context it belongs to, its id,
	// its own device (nil: a queue of the instance's), its memory limit
	// (0: none) and whether its device state was lost.
	parent    *Instance
	ctxID     uint32
	ctxDev    gpu.Device
	memLimit  uint64
	ctxShadow uint64 // its tail shadow's guest-physical address
	lost      atomic.Bool
	dying     []*Instance // contexts a reset took out, closed by the worker; guarded by ctxMu
	// ctxSent: the contexts earlier migration rounds sent (ExtractRound's
	// caller's, one round at a time).
	ctxSent map[uint32]*Instance
}

// NewInstance places a new instance on d and starts its worker.
func (d *Device) NewInstance(cfg InstanceConfig) (*Instance, error) {
	if cfg.ID == "" || cfg.Memory == nil || cfg.MemBytes == 0 {
		return nil, fmt.Errorf("new instance: id, memory and quota are required")
	}
	log := cfg.Logger
	if log == nil {
		log = d.log
	}
	lim := Limits{
		MemBytes:     cfg.MemBytes,
		MaxAlloc:     cfg.MaxAlloc,
		ComputeUnits: cfg.ComputeUnits,
		MaxWorkGroup: uint32(min(d.info.MaxWorkGroupSize, 1<<31)),
		Profile:      cfg.Profile,
		DeviceName:   d.info.Name,
	}
	if lim.MaxAlloc == 0 || lim.MaxAlloc > cfg.MemBytes {
		lim.MaxAlloc = cfg.MemBytes
	}
	if d.info.MaxAllocBytes != 0 && lim.MaxAlloc > d.info.MaxAllocBytes {
		lim.MaxAlloc = d.info.MaxAllocBytes
	}
	if lim.ComputeUnits == 0 || lim.ComputeUnits > d.info.ComputeUnits {
		lim.ComputeUnits = d.info.ComputeUnits
	}

	devInfo, err := makeDeviceInfo(d.info, lim.MaxWorkGroup)
	if err != nil {
		return nil, fmt.Errorf("new instance %s: device info: %w", cfg.ID, err)
	}

	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("new instance %s: %w", cfg.ID, ErrClosed)
	}
	if _, ok := d.instances[cfg.ID]; ok {
		d.mu.Unlock()
		return nil, fmt.Errorf("new instance %s: id in use", cfg.ID)
	}
	q, err := d.gpu.NewQueue()
	if err != nil {
		d.mu.Unlock()
		return nil, fmt.Errorf("new instance %s: %w", cfg.ID, err)
	}
	if cfg.Contexts > abi.MaxContexts {
		cfg.Contexts = abi.MaxContexts
	}
	in := d.newInstance(cfg, lim, devInfo, q, log)
	in.maxContexts = cfg.Contexts
	in.openContext = cfg.OpenContext
	d.instances[cfg.ID] = in
	d.mu.Unlock()
	go in.worker()
	return in, nil
}

// newInstance builds an instance (not started) on queue q: a vGPU's
// default context, or one of its device contexts (context.go).
func (d *Device) newInstance(cfg InstanceConfig, lim Limits, devInfo deviceInfoBlobs, q gpu.Queue, log *slog.Logger) *Instance {
	ctx, cancel := context.WithCancel(context.Background())
	in := &Instance{
		id:          cfg.ID,
		schedID:     cfg.ID,
		dev:         d,
		mem:         cfg.Memory,
		queue:       q,
		limits:      lim,
		devInfo:     devInfo,
		devMaxAlloc: d.info.MaxAllocBytes,
		log:         log.With("instance", cfg.ID),
		notify:      cfg.Notify,
		ctx:         ctx,
		cancel:      cancel,
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		tasks:       make(chan func()),
		state:       newState(),
		sh:          cfg.Shared,
		hold:        cfg.TurnHold,
		maxKeep:     DefaultMaxKeep,
	}
	if in.hold == 0 {
		in.hold = DefaultTurnHold
	}
	if in.sh == nil {
		in.sh = NewShared()
	} else {
		clear(unsafe.Slice((*byte)(unsafe.Pointer(in.sh)), SharedSize))
		in.sh.Magic, in.sh.Version = SharedMagic, SharedVersion
	}
	in.state.used = &in.sh.MemUsed
	in.state.progUsed = &in.sh.ProgramBytes
	in.progBytes.Store(cfg.ProgramBytes)
	in.memBytes.Store(lim.MemBytes)
	in.maxAlloc.Store(lim.MaxAlloc)
	return in
}

// ID returns the instance's id.
func (in *Instance) ID() string { return in.id }

// Limits returns the guest-visible limits.
func (in *Instance) Limits() Limits {
	in.mu.Lock()
	l := in.limits
	in.mu.Unlock()
	l.MemBytes, l.MaxAlloc = in.memBytes.Load(), in.maxAlloc.Load()
	return l
}

// SetProfile changes the instance's profile name and device memory quota
// at run time. It fails (abi.StatusBusy) when the instance already holds
// more than mem. The guest sees the new values in its registers.
func (in *Instance) SetProfile(name string, mem uint64) error {
	if mem == 0 {
		return abi.Errorf(abi.StatusInvalidArgument, "quota 0")
	}
	old := in.memBytes.Swap(mem)
	if used := in.state.used.Load(); used > mem {
		in.memBytes.Store(old)
		return abi.Errorf(abi.StatusBusy, "instance holds %d bytes, more than %d", used, mem)
	}
	in.maxAlloc.Store(quotaMaxAlloc(mem, in.devMaxAlloc))
	in.mu.Lock()
	in.limits.Profile = name
	in.mu.Unlock()
	return nil
}

// SetProgramBytes changes the instance's program quota (0: no bound). It
// fails (abi.StatusBusy) when the instance already holds more.
func (in *Instance) SetProgramBytes(n uint64) error {
	old := in.progBytes.Swap(n)
	if used := in.sh.ProgramBytes.Load(); n != 0 && used > n {
		in.progBytes.Store(old)
		return abi.Errorf(abi.StatusBusy, "instance holds %d bytes of programs, more than %d", used, n)
	}
	return nil
}

func quotaMaxAlloc(mem, devMax uint64) uint64 {
	if devMax != 0 && devMax < mem {
		return devMax
	}
	return mem
}

// Stats returns the instance's live counters.
func (in *Instance) Stats() *Stats { return &in.sh.Stats }

// Shared returns the instance's register-visible state and counters.
func (in *Instance) Shared() *Shared { return in.sh }

// Holds reports whether the instance holds any buffer or program (not
// counting those a pending reset is about to free).
func (in *Instance) Holds() bool {
	in.mu.Lock()
	resetting := in.resetState
	in.mu.Unlock()
	return !resetting && in.state.objects.Load() > 0
}

// MemUsed returns the device memory the instance holds, in bytes.
func (in *Instance) MemUsed() uint64 { return in.sh.MemUsed.Load() }

// publishLocked mirrors the ring position into the shared state. Caller
// holds mu.
func (in *Instance) publishLocked() {
	in.sh.Head.Store(in.head)
	in.sh.Done.Store(in.completed)
	en := uint32(0)
	if in.enabled {
		en = 1
	}
	in.sh.Enabled.Store(en)
}

// EnableRing validates cfg and starts fetching at index 0.
func (in *Instance) EnableRing(cfg RingConfig) error {
	if cfg.Slots == 0 || cfg.Slots > abi.MaxRingSlots || cfg.Slots&(cfg.Slots-1) != 0 {
		return abi.Errorf(abi.StatusRingConfig, "ring of %d slots", cfg.Slots)
	}
	if cfg.Base%abi.CommandSize != 0 || cfg.ComplBase%abi.ComplSize != 0 {
		return abi.Errorf(abi.StatusRingConfig, "ring %#x or completions %#x misaligned", cfg.Base, cfg.ComplBase)
	}
	ringLen := uint64(cfg.Slots) * abi.CommandSize
	complLen := uint64(cfg.Slots) * abi.ComplSize
	if overlaps(cfg.Base, ringLen, cfg.ComplBase, complLen) {
		return abi.Errorf(abi.StatusRingConfig, "ring and completions overlap")
	}
	probe := make([]byte, max(ringLen, complLen))
	if err := in.mem.ReadAt(probe[:ringLen], cfg.Base); err != nil {
		return abi.Errorf(abi.StatusRingConfig, "ring: %v", err)
	}
	if err := in.mem.ReadAt(probe[:complLen], cfg.ComplBase); err != nil {
		return abi.Errorf(abi.StatusRingConfig, "completions: %v", err)
	}
	if err := in.notifyOK(cfg); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return abi.Errorf(abi.StatusDeviceError, "instance closed")
	}
	if in.completed != in.head {
		return abi.Errorf(abi.StatusBusy, "command %d still executing", in.completed)
	}
	in.idlePollWordLocked()
	in.ring = cfg
	in.enabled = true
	in.epoch++
	in.head, in.tail, in.completed, in.shadowSeen = 0, 0, 0, 0
	in.publishLocked()
	return nil
}

func overlaps(a, alen, b, blen uint64) bool {
	return a < b+blen && b < a+alen
}

// DisableRing stops fetching; fetched commands still complete.
func (in *Instance) DisableRing() {
	in.mu.Lock()
	in.idlePollWordLocked()
	in.enabled = false
	in.publishLocked()
	in.mu.Unlock()
}

// RingEnabled reports whether the ring is fetching.
func (in *Instance) RingEnabled() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.enabled
}

// Doorbell publishes the guest's producer index and wakes the worker.
func (in *Instance) Doorbell(tail uint32) error {
	in.sh.Stats.Doorbells.Add(1)
	return in.publish(tail)
}

// publish applies a producer index, from a doorbell or a kick.
func (in *Instance) publish(tail uint32) error {
	in.mu.Lock()
	if !in.enabled {
		in.mu.Unlock()
		return abi.Errorf(abi.StatusRingConfig, "doorbell %d with the ring disabled", tail)
	}
	// Indices are free-running: the guest may have at most Slots commands
	// not yet completed, and may never move the tail backwards.
	newOut, oldOut := tail-in.completed, in.tail-in.completed
	if newOut > in.ring.Slots || newOut < oldOut {
		in.mu.Unlock()
		return abi.Errorf(abi.StatusRingOverflow, "tail %d with %d completed, %d published, %d slots",
			tail, in.completed, in.tail, in.ring.Slots)
	}
	in.tail = tail
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
	return nil
}

// Kick is a doorbell whose tail the device reads from guest RAM: the
// 4-byte little-endian word at shadow (abi.RegRingKick, ABI 1.3).
func (in *Instance) Kick(shadow uint64) error {
	in.sh.Stats.Doorbells.Add(1)
	if shadow%4 != 0 || shadow == 0 {
		return abi.Errorf(abi.StatusBadAddress, "kick: tail shadow at %#x is not a 4-byte aligned guest address", shadow)
	}
	var b [4]byte
	if err := in.mem.ReadAt(b[:], shadow); err != nil {
		return abi.Errorf(abi.StatusBadAddress, "kick: tail shadow at %#x: %v", shadow, err)
	}
	return in.publish(binary.LittleEndian.Uint32(b[:]))
}

// Head returns the number of commands fetched.
func (in *Instance) Head() uint32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.head
}

// Done returns the number of commands completed.
func (in *Instance) Done() uint32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.completed
}

// Reset stops the ring, drops unfetched commands and frees every buffer and
// program of the instance. It returns at once; the worker frees the
// resources before it fetches again.
func (in *Instance) Reset() {
	in.mu.Lock()
	in.idlePollWordLocked()
	in.enabled = false
	in.epoch++
	in.head, in.tail, in.completed = 0, 0, 0
	in.ring = RingConfig{}
	in.resetState = true
	in.sh.ErrStatus.Store(uint32(abi.StatusOK))
	in.sh.ErrCount.Store(0)
	in.publishLocked()
	in.mu.Unlock()
	in.detachContexts()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// Error returns the latched device error and the error count.
func (in *Instance) Error() (abi.Status, uint32) { return in.sh.Error() }

// LatchError records a device-level error for the guest to read.
func (in *Instance) LatchError(s abi.Status) {
	if s == abi.StatusOK {
		return
	}
	in.sh.Latch(s)
	in.log.Warn("device error latched", "status", s.String())
}

// AckError clears the latched error.
func (in *Instance) AckError() { in.sh.ErrStatus.Store(uint32(abi.StatusOK)) }

// Close stops the worker, frees the instance's device resources and
// removes it from its device. It is idempotent.
func (in *Instance) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		<-in.done
		return nil
	}
	in.closed = true
	in.idlePollWordLocked()
	in.enabled = false
	in.publishLocked()
	in.mu.Unlock()
	in.detachContexts()
	in.closeContexts()
	in.cancel()
	<-in.done
	in.freeAll()
	err := in.queue.Close()
	if in.parent == nil {
		in.dev.remove(in.id)
	}
	if err != nil {
		return fmt.Errorf("close instance %s: %w", in.id, err)
	}
	return nil
}

// worker fetches and executes commands in ring order until Close.
func (in *Instance) worker() {
	defer close(in.done)
	defer in.dropTurn()
	for {
		if !in.pollRing() {
			// Nothing more to fetch: a turn kept across commands goes back.
			in.dropTurn()
			select {
			case <-in.ctx.Done():
				return
			case <-in.wake:
			case t := <-in.tasks:
				in.runTask(t)
				continue
			}
		}
		// Busy: a doorbell from now on is seen before the loop blocks.
		in.announcePoll()
		for in.step() {
			if in.ctx.Err() != nil {
				return
			}
			in.runTasks()
		}
	}
}

// runTasks runs the tasks waiting (onWorker) without blocking.
func (in *Instance) runTasks() {
	for {
		select {
		case t := <-in.tasks:
			in.runTask(t)
		default:
			return
		}
	}
}

// runTask runs a task with no device turn kept across it: a task may
// wait for another goroutine (a migration's sink) with the ring frozen.
func (in *Instance) runTask(t func()) {
	in.dropTurn()
	t()
	in.dropTurn()
}

// step fetches and executes one command. It reports whether there may be
// more to do without waiting for a doorbell.
func (in *Instance) step() bool {
	in.mu.Lock()
	if in.resetState {
		in.resetState = false
		in.mu.Unlock()
		in.dropTurn() // launches in flight end before their buffers go
		in.closeContexts()
		in.freeAll()
		return true
	}
	if !in.enabled || in.head == in.tail || in.frozen {
		in.mu.Unlock()
		return false
	}
	idx, ring, epoch := in.head, in.ring, in.epoch
	in.head++
	in.publishLocked()
	in.mu.Unlock()
	in.curEpoch = epoch

	mask := ring.Slots - 1
	var slot [abi.CommandSize]byte
	if err := in.mem.ReadAt(slot[:], ring.Base+uint64(idx&mask)*abi.CommandSize); err != nil {
		in.fail(epoch, fmt.Errorf("fetch command %d: %w", idx, err))
		return false
	}
	cmd, err := abi.UnmarshalCommand(slot[:])
	var detail uint64
	if err == nil {
		in.cur = fetched{idx: idx, epoch: epoch, ring: ring, cmd: cmd}
		detail, err = in.execute(&cmd)
	}
	if errors.Is(err, ErrRelocate) {
		// The instance is being moved: the command goes back to the
		// ring, unfetched, and runs again where the instance lands.
		in.mu.Lock()
		if in.epoch == epoch && in.head == idx+1 {
			in.head = idx
			in.frozen = true
			in.publishLocked()
		}
		in.mu.Unlock()
		in.log.Info("command deferred: the instance is being moved", "index", idx, "opcode", cmd.Opcode.String())
		return false
	}
	if errors.Is(err, errPipelined) {
		// Enqueued behind the launches before it: syncLaunches
		// completes it.
		return true
	}
	return in.finish(fetched{idx: idx, epoch: epoch, ring: ring, cmd: cmd}, detail, err)
}

// fetched is a command the worker fetched: where its completion goes.
type fetched struct {
	idx   uint32
	epoch uint64
	ring  RingConfig
	cmd   abi.Command
}

// finish counts an executed command and writes its completion record. It
// reports whether the worker may go on.
func (in *Instance) finish(f fetched, detail uint64, err error) bool {
	if !in.record(f, detail, err) {
		return false
	}
	if in.notify != nil {
		in.notify(f.idx)
	}
	return true
}

// record is finish without the completion notice: syncLaunches sends one
// for a batch.
func (in *Instance) record(f fetched, detail uint64, err error) bool {
	idx, cmd := f.idx, f.cmd
	st := statusOf(err)
	if err != nil {
		in.sh.Stats.Errors.Add(1)
		lvl := slog.LevelDebug
		if st == abi.StatusInternal || st == abi.StatusDeviceError {
			lvl = slog.LevelError
		}
		in.log.Log(in.ctx, lvl, "command failed", "index", idx, "opcode", cmd.Opcode.String(), "status", st.String(), "err", err)
	}
	in.sh.Stats.Commands.Add(1)
	in.sh.Stats.statusCounts[min(int(st), abi.NumStatus-1)].Add(1)

	rec := abi.Completion{Seq: abi.SeqOf(uint64(idx)), Tag: cmd.Tag, Status: st, Opcode: cmd.Opcode, Detail: detail}
	var b [abi.ComplSize]byte
	rec.Marshal(b[:])
	at := f.ring.ComplBase + uint64(idx&(f.ring.Slots-1))*abi.ComplSize

	return in.complete(f.epoch, idx, at, b[:])
}

// complete writes a completion record unless the ring was reset since the
// command was fetched, and counts it.
func (in *Instance) complete(epoch uint64, idx uint32, at uint64, rec []byte) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.epoch != epoch {
		return true // reset or re-enabled meanwhile: the guest no longer expects this record
	}
	// Body first, then seq, so a guest polling seq sees a whole record.
	if err := in.mem.WriteAt(rec[8:], at+8); err != nil {
		in.failLocked(fmt.Errorf("write completion %d: %w", idx, err))
		return false
	}
	if err := in.mem.Store64(at, le64(rec)); err != nil {
		in.failLocked(fmt.Errorf("write completion %d: %w", idx, err))
		return false
	}
	in.completed++
	in.publishLocked()
	return true
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// stale reports whether the command being executed belongs to a ring
// that has since been reset or re-enabled: its results must not reach
// guest RAM, which the guest may have reused.
func (in *Instance) stale() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.epoch != in.curEpoch
}

// fail stops the ring after a device-level fault: the ring or completion
// area became unreachable, so the guest cannot be told per command.
func (in *Instance) fail(epoch uint64, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.epoch == epoch {
		in.failLocked(err)
	}
}

func (in *Instance) failLocked(err error) {
	in.enabled = false
	in.completed = in.head // the faulted command is abandoned; the ring may be re-enabled
	in.publishLocked()
	st := statusOf(err)
	if st == abi.StatusOK || errors.Is(err, context.Canceled) {
		st = abi.StatusDeviceError
	}
	in.sh.Latch(st)
	in.log.Warn("ring stopped", "err", err)
}
