package driver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
)

var le = binary.LittleEndian

// Defaults for Options.
const (
	DefaultSlots        = abi.PageSize / abi.CommandSize // 64: the ring fills one page
	DefaultStagingBytes = 8 << 20
	DefaultTimeout      = 60 * time.Second
	// MinStagingBytes holds the largest program source (abi.MaxSourceLen)
	// with its scatter-gather tables, options and log pages.
	MinStagingBytes = abi.MaxSourceLen + 16*abi.PageSize
)

// Options configure Open. The zero value is usable.
type Options struct {
	// Slots is the number of ring slots, a power of two from 1 to 64 (one
	// page of commands). 0 means DefaultSlots, capped by the device's
	// abi.RegMaxRingSlots.
	Slots int
	// StagingBytes is the size of the DMA staging pool. 0 means
	// DefaultStagingBytes; smaller values are raised to MinStagingBytes.
	StagingBytes int
	// Timeout bounds every wait for the device. 0 means DefaultTimeout.
	Timeout time.Duration
	// Kick rings the doorbell through abi.RegRingKick when the device
	// offers abi.FeatureKick (ABI 1.3): the tail goes into a shadow word in
	// guest RAM (the last 4 bytes of the completion page) and the register
	// write carries no value, so a transport can back it with an ioeventfd
	// (vfio-user under KVM) and the store costs the vCPU no exit to
	// vgpud. Without the feature the driver writes abi.RegRingTail.
	Kick bool
	// NoNotify turns notification suppression off. By default, when the
	// device offers abi.FeatureNotify (ABI 1.6), the driver rings through
	// the kick doorbell (as Kick) with a poll word beside the tail shadow
	// (the completion page's last 16 bytes), and skips the kick while the
	// device says it polls the shadow (docs/ABI.md "Poll word"): a guest
	// whose device is busy, or was a moment ago, submits with stores
	// alone.
	NoNotify bool
	// NoReset skips the device reset at Open (abi.RingCtrlReset frees every
	// buffer and program of the instance).
	NoReset bool
	// Logger receives debug logs; nil means slog.Default().
	Logger *slog.Logger
}

// Info is what the device reports about itself at Open.
type Info struct {
	Version      uint32
	Features     uint32
	MemSize      uint64 // device memory quota of the profile, bytes
	MaxAlloc     uint64 // largest single buffer, bytes
	ComputeUnits uint32
	MaxRingSlots uint32
	MaxWorkGroup uint32
	Profile      string
	Name         string
	// MaxContexts is abi.RegMaxContexts: the device contexts (ABI 1.5)
	// the instance offers besides the default ring; 0 before 1.5.
	MaxContexts uint32
}

// Stats counts the driver's work since Open.
type Stats struct {
	Commands  uint64 // commands written into the ring
	Doorbells uint64 // doorbells rung: writes of abi.RegRingTail, abi.RegRingKick or abi.RegContextKick
	// Suppressed counts the doorbells not rung because the device said
	// it polls the tail shadow (Options.NoNotify).
	Suppressed uint64
	// Rekicks counts the kicks a wait sent before it slept, after a
	// skipped doorbell (a fault's bound, not a doorbell of its own).
	Rekicks   uint64
	Completed uint64 // completion records reaped
	Failed    uint64 // completion records with a non-OK status
	Waits     uint64 // times the driver had to wait for the device
	// RoomWaits counts the submissions that found the ring full and
	// waited for a slot; RoomYields the times such a wait yielded the
	// processor in a loop rather than sleeping (0 since issue 43: a
	// burst of launches does not spin its producer).
	RoomWaits  uint64
	RoomSleeps uint64
	RoomYields uint64
	// StagedBytes are the bytes Write and Read copied through the staging
	// pool; InPlaceBytes those WriteFrom and ReadInto had the device copy
	// straight from or into the caller's DMA memory (dmacopy.go).
	StagedBytes  uint64
	InPlaceBytes uint64
}

// page is one DMA page of the staging pool.
type page struct {
	buf []byte // abi.PageSize bytes
	gpa uint64
}

// entry is the driver's bookkeeping for one in-flight command.
type entry struct {
	op     abi.Opcode
	tag    uint64
	sync   bool // the caller collects the completion itself
	raw    bool // submitted by SubmitRaw: the record is not checked against it
	pages  []page
	onDone func(abi.Completion)
	// owned: onDone owns the command's status; a failure is not kept for
	// the next Finish (callers with their own error attribution, e.g. a
	// server multiplexing several clients on one device).
	owned bool
}

// Device is an open vGPU.
type Device struct {
	mem  Memory
	opts Options
	log  *slog.Logger

	ring, compl, fence page

	// migMu serialises Suspend and Resume (migrate.go).
	migMu sync.Mutex
	// abandoned: the device's state is gone (Abandon); every call fails
	// with ErrDeviceLost. Read without mu.
	abandoned atomic.Bool

	// smu guards the suspension gate and info; it is a leaf lock, taken
	// with or without mu, never held while taking mu.
	smu sync.Mutex
	// gate is nil while calls may proceed; Suspend sets it before it
	// drains, and it is closed (and set to nil) when the device resumes,
	// when a Suspend fails, or at Close.
	gate      chan struct{}
	suspended bool // Suspend completed; the registers are closed unless kept
	kept      bool // SuspendMapped: suspended with the registers mapped
	info      Info

	mu       sync.Mutex
	regs     Registers // replaced by Resume
	closed   bool
	slots    uint64
	next     uint64 // index of the next command to write
	rung     uint64 // tail last written to the doorbell
	kick     bool   // the doorbell is RegRingKick with a tail shadow (Options.Kick)
	notify   bool   // a poll word says when the kick may be skipped (Options.NoNotify)
	skipped  bool   // the last doorbell was skipped: the next wait that sleeps kicks
	reaped   uint64 // every index below has been reaped
	inflight []entry
	results  map[uint64]abi.Completion // reaped completions of sync commands
	free     []page                    // staging pool
	poolSize int                       // pages in the pool
	deferred error                     // first failure of an async command
	nextBuf  uint32
	nextProg uint32
	fenceVal uint64
	stats    Stats
	// roomSleeps is Stats.RoomSleeps, kept apart so that a test can
	// watch a wait for ring room that holds mu.
	roomSleeps atomic.Uint64
	lostAt     time.Time // last RegError read while waiting (deviceLost)
	// lost: the device reported StatusDeviceLost; every command that was
	// in flight has been failed with it, and every call fails with
	// ErrDeviceLost until Reopen.
	lost bool
	// lostSeen mirrors lost for LostSeen, which must not wait for mu.
	lostSeen atomic.Bool
	// gen counts Reopens: buffers and programs of an older generation
	// are gone with the context they were made in (stale).
	gen uint64

	// A device context's Device (context.go): the default ring's Device
	// that made it, its id, its memory limit. parent nil: the default
	// ring.
	parent   *Device
	ctxID    uint32
	memLimit uint64
	// resets counts the resets of a default ring's Device (Reopen): each
	// destroys every context of the vGPU. A context keeps the count it
	// was made under (parentResets) and is lost once it moves.
	resets       atomic.Uint64
	parentResets uint64
	// kids are the device contexts opened on a default ring's Device and
	// not closed: Suspend holds them, Resume moves them, Abandon gives
	// them up with it.
	kidsMu sync.Mutex
	kids   map[*Device]struct{}
}

// stale refuses a buffer or program made before the last Reopen: its
// handle named an object of the lost context, and may name nothing, or
// (handles keep counting) never another object. Caller holds mu.
func (d *Device) stale(what string, h uint32, gen uint64) error {
	if gen != d.gen {
		return fmt.Errorf("%s %d was made before the device was reopened: %w", what, h, ErrDeviceLost)
	}
	return nil
}

// Open checks the device behind regs, sets up the ring, completion records,
// fence page and staging pool in mem, and enables the ring.
func Open(regs Registers, mem Memory, opts Options) (*Device, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.StagingBytes == 0 {
		opts.StagingBytes = DefaultStagingBytes
	}
	if opts.StagingBytes < MinStagingBytes {
		opts.StagingBytes = MinStagingBytes
	}
	d := &Device{regs: regs, mem: mem, opts: opts, log: opts.Logger, results: map[uint64]abi.Completion{}}
	if d.log == nil {
		d.log = slog.Default()
	}
	if id := regs.Read32(abi.RegID); id != abi.IDMagic {
		return nil, fmt.Errorf("open: id register %#x, want %#x: %w", id, abi.IDMagic, ErrNoDevice)
	}
	d.info = readInfo(regs)
	if err := checkVersion(d.info); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	slots := opts.Slots
	if slots == 0 {
		slots = DefaultSlots
		if m := int(d.info.MaxRingSlots); m > 0 && m < slots {
			slots = m
		}
	}
	if slots < 1 || slots > DefaultSlots || slots&(slots-1) != 0 {
		return nil, fmt.Errorf("open: %d ring slots (want a power of two up to %d): %w", slots, DefaultSlots, ErrInvalid)
	}
	if m := int(d.info.MaxRingSlots); m > 0 && slots > m {
		return nil, fmt.Errorf("open: %d ring slots, device allows %d: %w", slots, m, ErrInvalid)
	}
	d.slots = uint64(slots)
	d.inflight = make([]entry, slots)

	fixed, err := allocPages(mem, 3*abi.PageSize)
	if err != nil {
		return nil, fmt.Errorf("open: ring pages: %w", err)
	}
	d.ring, d.compl, d.fence = fixed[0], fixed[1], fixed[2]
	for _, p := range fixed {
		clear(p.buf)
	}
	d.free, err = allocPages(mem, opts.StagingBytes)
	if err != nil {
		return nil, fmt.Errorf("open: staging pool: %w", err)
	}
	d.poolSize = len(d.free)

	if !opts.NoReset {
		regs.Write32(abi.RegRingCtrl, abi.RingCtrlReset)
	}
	regs.Write32(abi.RegErrorAck, 1)
	regs.Write32(abi.RegRingBaseLo, uint32(d.ring.gpa))
	regs.Write32(abi.RegRingBaseHi, uint32(d.ring.gpa>>32))
	regs.Write32(abi.RegComplBaseLo, uint32(d.compl.gpa))
	regs.Write32(abi.RegComplBaseHi, uint32(d.compl.gpa>>32))
	regs.Write32(abi.RegRingSlots, uint32(slots))
	d.programKick(regs)
	regs.Write32(abi.RegRingCtrl, abi.RingCtrlEnable)
	st := regs.Read32(abi.RegStatus)
	if st&abi.StatusBitError != 0 || st&abi.StatusBitRingEnabled == 0 {
		s := abi.Status(regs.Read32(abi.RegError))
		if s == abi.StatusOK {
			s = abi.StatusRingConfig
		}
		return nil, fmt.Errorf("open: enable ring (status register %#x): %w", st, abi.Errorf(s, "device refused the ring"))
	}
	d.log.Debug("vgpu open", "profile", d.info.Profile, "device", d.info.Name, "slots", slots,
		"staging_pages", d.poolSize, "mem", d.info.MemSize)
	return d, nil
}

// checkVersion refuses a device whose ABI major version is not the driver's.
func checkVersion(in Info) error {
	if major := in.Version >> 16; major != abi.VersionMajor {
		return fmt.Errorf("device abi %d.%d, driver %d.%d: %w",
			major, in.Version&0xffff, abi.VersionMajor, abi.VersionMinor, ErrVersion)
	}
	return nil
}

func readInfo(r Registers) Info {
	rd64 := func(lo, hi uint32) uint64 { return uint64(r.Read32(lo)) | uint64(r.Read32(hi))<<32 }
	return Info{
		Version:      r.Read32(abi.RegVersion),
		Features:     r.Read32(abi.RegFeatures),
		MemSize:      rd64(abi.RegMemSizeLo, abi.RegMemSizeHi),
		MaxAlloc:     rd64(abi.RegMaxAllocLo, abi.RegMaxAllocHi),
		ComputeUnits: r.Read32(abi.RegComputeUnits),
		MaxRingSlots: r.Read32(abi.RegMaxRingSlots),
		MaxWorkGroup: r.Read32(abi.RegMaxWorkGroup),
		Profile:      readString(r, abi.RegProfileName, abi.ProfileNameLen),
		Name:         readString(r, abi.RegDeviceName, abi.DeviceNameLen),
		MaxContexts:  r.Read32(abi.RegMaxContexts),
	}
}

func readString(r Registers, off uint32, n int) string {
	b := make([]byte, n)
	for i := 0; i < n; i += 4 {
		le.PutUint32(b[i:], r.Read32(off+uint32(i)))
	}
	s, _, _ := strings.Cut(string(b), "\x00")
	return s
}

// allocPages allocates n bytes from mem and splits them into pages, checking
// that the Memory kept its contract.
func allocPages(mem Memory, n int) ([]page, error) {
	dma, err := mem.Alloc(n)
	if err != nil {
		return nil, err
	}
	np := (n + abi.PageSize - 1) / abi.PageSize
	if len(dma.Pages) < np || len(dma.Buf) < len(dma.Pages)*abi.PageSize {
		return nil, fmt.Errorf("memory returned %d bytes in %d pages for %d bytes: %w", len(dma.Buf), len(dma.Pages), n, ErrInvalid)
	}
	if !aligned8(dma.Buf) {
		return nil, fmt.Errorf("memory returned a buffer not 8-byte aligned: %w", ErrInvalid)
	}
	ps := make([]page, len(dma.Pages))
	for i, gpa := range dma.Pages {
		if gpa%abi.PageSize != 0 {
			return nil, fmt.Errorf("memory returned page address %#x not page aligned: %w", gpa, ErrInvalid)
		}
		ps[i] = page{buf: dma.Buf[i*abi.PageSize : (i+1)*abi.PageSize : (i+1)*abi.PageSize], gpa: gpa}
	}
	return ps, nil
}

// Info returns what the device reported at Open, or at the last Resume
// (after a migration the device may be another model).
func (d *Device) Info() Info {
	d.smu.Lock()
	defer d.smu.Unlock()
	return d.info
}

// Regs returns the device's registers, for tests that poke them directly.
// Resume replaces them; while the device is suspended they are closed.
func (d *Device) Regs() Registers {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.regs
}

// Memory returns the DMA allocator the device was opened with.
func (d *Device) Memory() Memory { return d.mem }

// Stats returns the driver's counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stats
	st.RoomSleeps = d.roomSleeps.Load()
	return st
}

// Close waits for every submitted command, stops the ring and makes further
// calls fail with ErrClosed. It returns the first unreported command failure.
// DMA pages stay pinned until the process exits. Closing a suspended device
// touches no register (they are closed and nothing is in flight) and wakes
// the calls waiting for Resume, which fail with ErrClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if d.ctxID != 0 {
		defer d.forget()
		// While its vGPU is suspended for a migration a context's
		// registers are closed: wait for Resume like any call.
		if err := d.check(); err != nil && !errors.Is(err, ErrDeviceLost) {
			d.closed = true
			return err
		}
	}
	if d.Suspended() || d.abandoned.Load() || (d.lost && d.ctxID == 0) {
		d.closed = true
		d.openGate()
		return nil
	}
	var err error
	if !d.lost {
		err = d.drain()
	}
	d.closed = true
	if d.ctxID != 0 {
		// The context ends on the device: its memory is the instance's
		// again, and the device no longer touches its pages.
		if derr := d.destroyContext(); derr != nil && err == nil {
			err = derr
		}
		return err
	}
	d.regs.Write32(abi.RegRingCtrl, 0)
	return err
}

// Reopen resets the device and sets its ring up again on the same
// registers and memory, as Open does: the way back from a lost device
// context (docs/ABI.md "Device lost": the reset brings the instance back
// on a fresh one). Every buffer and program is freed by the reset; every
// command still in flight fails with StatusDeviceLost (a reset writes no
// completion record). Buffer and program handles keep counting, so a
// handle from before the reset names nothing afterwards. It fails after
// Close, on an abandoned device (its registers are another device's) and
// while the device is suspended.
func (d *Device) Reopen() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return ErrClosed
	case d.abandoned.Load():
		return d.lostErr()
	case d.Suspended():
		return fmt.Errorf("reopen: %w", ErrSuspended)
	}
	d.failInflight(abi.StatusDeviceLost)
	d.gen++
	if d.ctxID == 0 {
		d.resets.Add(1)
	}
	if d.ctxID != 0 {
		// A context comes back by being made again (its parent's ring:
		// a reset would end every context of the vGPU).
		if err := d.destroyContext(); err != nil && !errors.Is(err, abi.StatusNotFound.Error()) {
			return fmt.Errorf("reopen: %w", err)
		}
		clear(d.results)
		d.deferred = nil
		if err := d.createContext(); err != nil {
			return fmt.Errorf("reopen: %w", err)
		}
		d.lost = false
		d.lostSeen.Store(false)
		d.log.Info("vgpu context reopened: buffers and programs gone")
		return nil
	}
	regs := d.regs
	regs.Write32(abi.RegRingCtrl, abi.RingCtrlReset)
	regs.Write32(abi.RegErrorAck, 1)
	// Records and tails of the old ring must not match the new indexes.
	clear(d.ring.buf)
	clear(d.compl.buf)
	d.next, d.rung, d.reaped = 0, 0, 0
	clear(d.results)
	d.deferred = nil
	regs.Write32(abi.RegRingBaseLo, uint32(d.ring.gpa))
	regs.Write32(abi.RegRingBaseHi, uint32(d.ring.gpa>>32))
	regs.Write32(abi.RegComplBaseLo, uint32(d.compl.gpa))
	regs.Write32(abi.RegComplBaseHi, uint32(d.compl.gpa>>32))
	regs.Write32(abi.RegRingSlots, uint32(d.slots))
	d.programKick(regs)
	regs.Write32(abi.RegRingCtrl, abi.RingCtrlEnable)
	st := regs.Read32(abi.RegStatus)
	if st&abi.StatusBitError != 0 || st&abi.StatusBitRingEnabled == 0 {
		s := abi.Status(regs.Read32(abi.RegError))
		if s == abi.StatusOK {
			s = abi.StatusRingConfig
		}
		d.lost = true
		d.lostSeen.Store(true)
		return fmt.Errorf("reopen: enable ring (status register %#x): %w", st, abi.Errorf(s, "device refused the ring"))
	}
	d.lost = false
	d.lostSeen.Store(false)
	d.lostAt = time.Time{}
	// A nop's completion says the device is quiescent: a command that was
	// executing at the reset has ended (docs/ABI.md "Reset").
	idx, err := d.submit(abi.NewCommand(&abi.Nop{}, 0, d.next), entry{sync: true})
	if err == nil {
		_, err = d.waitOK(idx)
	}
	if err != nil {
		return fmt.Errorf("reopen: nop after the reset: %w", err)
	}
	d.log.Info("vgpu reopened: ring reset, buffers and programs gone")
	return nil
}

// --- ring mechanics (d.mu held) ---

// check is called with mu held at the start of every call that touches the
// ring or the registers: it fails after Close and, while the device is
// suspended (or being suspended), releases mu and waits for Resume, at most
// Options.Timeout, then fails with ErrSuspended.
func (d *Device) check() error {
	var deadline time.Time
	for {
		if d.closed {
			return ErrClosed
		}
		if err := d.contextGone(); err != nil {
			return err
		}
		if d.abandoned.Load() {
			return d.lostErr()
		}
		if d.lost {
			return fmt.Errorf("%w: reset the device (Reopen) to continue", ErrDeviceLost)
		}
		d.smu.Lock()
		g := d.gate
		d.smu.Unlock()
		if g == nil {
			return nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(d.opts.Timeout)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return fmt.Errorf("device suspended for migration for more than %v: %w", d.opts.Timeout, ErrSuspended)
		}
		d.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-g:
		case <-t.C:
		}
		t.Stop()
		d.mu.Lock()
	}
}

// submit writes c into the next slot without ringing the doorbell, waiting
// for a free slot if the ring is full.
func (d *Device) submit(c abi.Command, e entry) (uint64, error) {
	for d.next-d.reaped >= d.slots {
		d.stats.RoomWaits++
		if err := d.reapOneFor(context.Background(), true); err != nil {
			return 0, err
		}
	}
	idx := d.next
	e.op, e.tag = c.Opcode, c.Tag
	c.Marshal(d.ring.buf[(idx%d.slots)*abi.CommandSize:])
	d.inflight[idx%d.slots] = e
	d.next++
	d.stats.Commands++
	return idx, nil
}

// flush rings the doorbell if commands were written since the last one.
func (d *Device) flush() {
	if d.rung == d.next {
		return
	}
	d.rung = d.next
	if d.ctxID != 0 || d.kick {
		// The store is an atomic exchange: a full barrier before the
		// load of the poll word (docs/ABI.md "Poll word").
		store32(d.compl.buf, tailShadowOffset, uint32(d.rung))
		if d.notify && load64(d.compl.buf, pollWordOffset) == abi.PollWordPolling {
			d.stats.Suppressed++
			d.skipped = true
			return
		}
		d.kickNow()
	} else {
		d.regs.Write32(abi.RegRingTail, uint32(d.rung))
	}
	d.stats.Doorbells++
}

// tailShadowOffset is where in the completion page the tail shadow lives
// (Options.Kick): its last word; at most DefaultSlots records of
// abi.ComplSize bytes (half the page) precede it.
const tailShadowOffset = abi.PageSize - 4

// pollWordOffset is where in the completion page the poll word lives
// (Options.NoNotify): 8-byte aligned, before the tail shadow.
const pollWordOffset = abi.PageSize - 16

// kickSkipped kicks if the last doorbell was skipped: a wait that has
// slept rekickAfter does, in case the device stopped polling without seeing the tail
// (it died, or a migration moved the guest with its poll word). The
// device's protocol makes this redundant; it bounds what a fault costs.
func (d *Device) kickSkipped() {
	if !d.skipped {
		return
	}
	d.skipped = false
	d.kickNow()
	d.stats.Rekicks++
}

// rekickAfter is how long a wait after a skipped doorbell goes before it
// kicks anyway (kickSkipped): far longer than a polling device takes to
// see a tail, short against the faults it bounds.
const rekickAfter = 5 * time.Millisecond

// kickNow writes the kick register of d's ring: RegContextKick with its
// id for a device context, RegRingKick for the default ring.
func (d *Device) kickNow() {
	if d.ctxID != 0 {
		d.regs.Write32(abi.RegContextKick, d.ctxID)
		return
	}
	d.regs.Write32(abi.RegRingKick, 1)
}

// programKick turns the kick doorbell on when it was asked for and the
// device behind regs offers it; the tail shadow is set to the last tail
// rung. Caller holds mu or owns d alone.
func (d *Device) programKick(regs Registers) {
	d.notify = !d.opts.NoNotify && d.info.Features&abi.FeatureNotify != 0 && d.info.Features&abi.FeatureKick != 0
	d.kick = (d.opts.Kick || d.notify) && d.info.Features&abi.FeatureKick != 0
	d.skipped = false
	if !d.kick {
		return
	}
	store32(d.compl.buf, tailShadowOffset, uint32(d.rung))
	gpa := d.compl.gpa + tailShadowOffset
	regs.Write32(abi.RegTailShadowLo, uint32(gpa))
	regs.Write32(abi.RegTailShadowHi, uint32(gpa>>32))
	if d.notify {
		// Zeroed before its address is given: the device has not polled.
		store64(d.compl.buf, pollWordOffset, abi.PollWordIdle)
		pw := d.compl.gpa + pollWordOffset
		regs.Write32(abi.RegPollWordLo, uint32(pw))
		regs.Write32(abi.RegPollWordHi, uint32(pw>>32))
	}
}

// complSeq reads the seq word of slot idx's completion record.
func (d *Device) complSeq(idx uint64) uint64 {
	return load64(d.compl.buf, int(idx%d.slots)*abi.ComplSize+abi.ComplSeqOffset)
}

func (d *Device) complRecord(idx uint64) abi.Completion {
	off := int(idx%d.slots) * abi.ComplSize
	c, _ := abi.UnmarshalCompletion(d.compl.buf[off : off+abi.ComplSize])
	c.Seq = load64(d.compl.buf, off+abi.ComplSeqOffset)
	return c
}

// poll waits until done returns true, spinning briefly, then yielding, then
// sleeping, until Options.Timeout.
func (d *Device) poll(what string, done func() bool) error {
	return d.pollCtx(context.Background(), what, done)
}

// pollCtx is poll that also gives up when ctx ends.
func (d *Device) pollCtx(ctx context.Context, what string, done func() bool) error {
	return d.pollFor(ctx, what, done, false)
}

// roomSleep bounds the sleeps of a wait for ring room (pollFor): a burst's
// next slot frees when the device completes a batch of commands, which
// takes longer than a wake-up.
const (
	roomSleepMin = 10 * time.Microsecond
	roomSleepMax = 160 * time.Microsecond
)

// pollFor is pollCtx; room says the caller is a submission waiting for a
// free ring slot. Such a wait sleeps (nanosleep, backing off from
// roomSleepMin to roomSleepMax) where another yields the processor in a
// loop: the device's own processes, which free the slot, need that
// processor on a small host.
func (d *Device) pollFor(ctx context.Context, what string, done func() bool, room bool) error {
	if done() {
		return nil
	}
	d.stats.Waits++
	start := time.Now()
	sleep := time.Microsecond
	for i := 0; ; i++ {
		if done() {
			return nil
		}
		switch {
		case i < 200:
			// spin: completions of short commands land within microseconds
		case i < 2000 && room:
			d.roomSleeps.Add(1)
			preciseSleep(min(roomSleepMin<<min(i-200, 4), roomSleepMax))
		case i < 2000:
			if room {
				d.stats.RoomYields++
			}
			runtime.Gosched()
		default:
			if d.skipped && time.Since(start) >= rekickAfter {
				d.kickSkipped()
			}
			time.Sleep(sleep)
			if sleep < time.Millisecond {
				sleep *= 2
			}
			if err := ctx.Err(); err != nil && !done() {
				return fmt.Errorf("wait for %s: %w", what, err)
			}
		}
		if i%64 == 63 {
			if err := d.deviceLost(); err != nil {
				return fmt.Errorf("wait for %s: %w", what, err)
			}
		}
		if i%64 == 63 && time.Since(start) > d.opts.Timeout {
			if done() {
				return nil
			}
			return fmt.Errorf("wait for %s after %v (device error register: %v, head %d, done %d): %w",
				what, d.opts.Timeout, abi.Status(d.regs.Read32(abi.RegError)),
				d.regs.Read32(abi.RegRingHead), d.regs.Read32(abi.RegRingDone), ErrTimeout)
		}
	}
}

// lostCheck is how often a waiting driver reads RegError to notice that
// the instance's device context is gone (docs/ABI.md "Device lost"): each
// read is a trapped MMIO access, so not at every poll.
const lostCheck = 10 * time.Millisecond

// deviceLost reads RegError when lostCheck has passed since the last read
// and reports a lost device context. On a lost device every command in
// flight fails (failInflight): the device never completes them (docs/ABI.md
// "Device lost"). Caller holds mu.
func (d *Device) deviceLost() error {
	if d.abandoned.Load() {
		return d.lostErr()
	}
	if d.lost {
		return fmt.Errorf("%w: reset the device (Reopen) to continue", ErrDeviceLost)
	}
	if err := d.contextGone(); err != nil {
		return err
	}
	now := time.Now()
	if now.Sub(d.lostAt) < lostCheck {
		return nil
	}
	d.lostAt = now
	if st := abi.Status(d.regs.Read32(abi.RegError)); st == abi.StatusDeviceLost {
		// What completed before the loss keeps its result: records may
		// have landed after the caller last looked, and none lands once
		// the device reads lost (the worker that wrote them is gone).
		for d.reaped < d.next && d.complSeq(d.reaped) == abi.SeqOf(d.reaped) {
			if err := d.reapOne(); err != nil {
				break
			}
		}
		n := d.next - d.reaped
		d.lost = true
		d.lostSeen.Store(true)
		d.failInflight(abi.StatusDeviceLost)
		d.log.Warn("vgpu device context lost: commands in flight failed", "commands", n)
		return fmt.Errorf("%w: %d commands in flight failed; reset the device (Reopen) to continue", ErrDeviceLost, n)
	}
	return nil
}

// contextGone reports a device context whose vGPU was reset since the
// context was made (its default ring reopened after a loss): the context
// went with it and nothing of it will complete. Caller holds mu.
func (d *Device) contextGone() error {
	if d.ctxID == 0 || d.lost || d.parent.resets.Load() == d.parentResets {
		return nil
	}
	d.lost = true
	d.lostSeen.Store(true)
	n := d.next - d.reaped
	d.failInflight(abi.StatusDeviceLost)
	return fmt.Errorf("%w: the vGPU was reset, %d commands of context %d failed; reopen it to continue", ErrDeviceLost, n, d.ctxID)
}

// failInflight ends every command submitted and not reaped as if the
// device had completed it with status st: callbacks run, staging pages
// return to the pool, the first failure of an untracked asynchronous
// command is kept for Finish. A synchronous command's caller gets the
// error of its wait instead of a record. Caller holds mu.
func (d *Device) failInflight(st abi.Status) {
	for ; d.reaped < d.next; d.reaped++ {
		idx := d.reaped
		e := d.inflight[idx%d.slots]
		d.inflight[idx%d.slots] = entry{}
		rec := abi.Completion{Seq: abi.SeqOf(idx), Tag: e.tag, Opcode: e.op, Status: st}
		d.stats.Completed++
		d.stats.Failed++
		if e.onDone != nil {
			e.onDone(rec)
		}
		d.free = append(d.free, e.pages...)
		if !e.sync && !e.owned && d.deferred == nil {
			d.deferred = cmdErr(idx, rec, e.op, e.tag)
		}
	}
	d.rung = d.next
}

// reapOne waits for the oldest unreaped command, checks its record and
// releases its slot and staging pages.
func (d *Device) reapOne() error { return d.reapOneCtx(context.Background()) }

// reapOneCtx is reapOne whose wait also ends with ctx.
func (d *Device) reapOneCtx(ctx context.Context) error { return d.reapOneFor(ctx, false) }

// reapOneFor is reapOneCtx; room says a submission waits for the slot
// (pollFor).
func (d *Device) reapOneFor(ctx context.Context, room bool) error {
	idx := d.reaped
	if idx >= d.next {
		return nil
	}
	if d.rung <= idx {
		d.flush()
	}
	if err := d.pollFor(ctx, fmt.Sprintf("command %d", idx), func() bool { return d.complSeq(idx) == abi.SeqOf(idx) }, room); err != nil {
		return err
	}
	rec := d.complRecord(idx)
	e := d.inflight[idx%d.slots]
	d.inflight[idx%d.slots] = entry{}
	d.reaped++
	d.stats.Completed++
	if !e.raw && (rec.Tag != e.tag || rec.Opcode != e.op) {
		err := fmt.Errorf("command %d (%v, tag %#x) completed as %v tag %#x: %w", idx, e.op, e.tag, rec.Opcode, rec.Tag, ErrProtocol)
		if e.sync {
			rec.Status = abi.StatusInternal
			d.results[idx] = rec
		} else if e.owned {
			rec.Status = abi.StatusInternal
			e.onDone(rec)
		} else if d.deferred == nil {
			d.deferred = err
		}
		d.free = append(d.free, e.pages...)
		return nil
	}
	if rec.Status != abi.StatusOK {
		d.stats.Failed++
	}
	if rec.Status == abi.StatusDeviceLost && d.ctxID != 0 && !d.lost {
		// A context's loss comes in its records (docs/ABI.md "Device
		// contexts"): everything later fails the same way until Reopen.
		d.lost = true
		d.lostSeen.Store(true)
		d.log.Warn("vgpu device context lost")
	}
	if e.onDone != nil {
		e.onDone(rec)
	}
	d.free = append(d.free, e.pages...)
	switch {
	case e.sync:
		d.results[idx] = rec
	case rec.Status != abi.StatusOK && d.deferred == nil && !e.owned:
		d.deferred = cmdErr(idx, rec, e.op, e.tag)
	}
	return nil
}

func cmdErr(idx uint64, rec abi.Completion, op abi.Opcode, tag uint64) *CommandError {
	return &CommandError{Index: idx, Opcode: op, Tag: tag, Status: rec.Status, Detail: rec.Detail}
}

// waitIndex waits for the sync command idx and returns its record.
func (d *Device) waitIndex(idx uint64) (abi.Completion, error) {
	if idx >= d.next {
		return abi.Completion{}, fmt.Errorf("wait for command %d: only %d submitted: %w", idx, d.next, ErrInvalid)
	}
	for d.reaped <= idx {
		if err := d.reapOne(); err != nil {
			return abi.Completion{}, err
		}
	}
	rec, ok := d.results[idx]
	if !ok {
		return abi.Completion{}, fmt.Errorf("wait for command %d: no result kept (not a synchronous command or already collected): %w", idx, ErrInvalid)
	}
	delete(d.results, idx)
	return rec, nil
}

// waitOK waits for sync command idx and converts a failure to an error.
func (d *Device) waitOK(idx uint64) (abi.Completion, error) {
	rec, err := d.waitIndex(idx)
	if err != nil {
		return rec, err
	}
	if rec.Status != abi.StatusOK {
		return rec, cmdErr(idx, rec, rec.Opcode, rec.Tag)
	}
	return rec, nil
}

// drain reaps every submitted command and returns (and clears) the first
// failure of an asynchronous one.
func (d *Device) drain() error {
	for d.reaped < d.next {
		if err := d.reapOne(); err != nil {
			return err
		}
	}
	err := d.deferred
	d.deferred = nil
	return err
}

// pages takes n staging pages, reaping completed commands to free some.
func (d *Device) pages(n int) ([]page, error) {
	if n > d.poolSize {
		return nil, fmt.Errorf("need %d staging pages, pool has %d: %w", n, d.poolSize, ErrInvalid)
	}
	for len(d.free) < n {
		if d.reaped == d.next {
			return nil, fmt.Errorf("staging pool: %d pages free, %d needed, nothing in flight: %w", len(d.free), n, abi.Errorf(abi.StatusInternal, "staging leak"))
		}
		if err := d.reapOne(); err != nil {
			return nil, err
		}
	}
	ps := d.free[len(d.free)-n:]
	d.free = d.free[:len(d.free)-n]
	return append([]page(nil), ps...), nil
}
