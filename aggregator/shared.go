package aggregator

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/reuse"
)

// Shared is the part of an instance's state that the register file and
// the operator read without asking the instance's worker, and the one
// value the register file writes: the producer index a doorbell publishes.
// It is fixed-layout memory of atomics and plain integers, no pointers, so
// it may live in a page shared between vgpud's main process and a worker
// process (docs/worker.md "Instance page"); an instance run in the main
// process keeps it on the heap. Both sides treat what the other wrote as
// untrusted: ErrStatus is checked before it is shown (Error), counters are
// only counters.
type Shared struct {
	Magic   uint32 // SharedMagic once initialised
	Version uint32 // SharedVersion

	// Tail is the producer index the register file last published (the
	// doorbell); the worker reads it and applies it with Doorbell.
	Tail atomic.Uint32
	// Written by the worker, under its instance's lock.
	Head    atomic.Uint32 // commands fetched
	Done    atomic.Uint32 // commands completed
	Enabled atomic.Uint32 // 1 while the ring fetches
	// The latched device error: either side latches, the register file
	// acknowledges.
	ErrStatus atomic.Uint32
	ErrCount  atomic.Uint32

	MemUsed atomic.Uint64 // device bytes held by the instance's buffers
	Stats   Stats
	Reuse   reuse.Stats
	// ProgramBytes counts the programs the instance holds: source, options
	// and built binaries.
	ProgramBytes atomic.Uint64
	// Kernels is the distribution of the lengths of the launches the
	// device ran. Appended after the fields of the first layout, so a
	// worker started by an older vgpud (an upgrade in place) leaves it
	// zero rather than writing somewhere else.
	Kernels KernelHist
	// A kick (abi.RegRingKick, ABI 1.3): the register file stores the
	// tail shadow's guest-physical address in Shadow and 1 in Kick before
	// it signals; the worker, seeing Kick swap from 1 to 0, reads the tail
	// from guest RAM at Shadow instead of using Tail. A doorbell stores 0
	// in Kick. Appended after Kernels for the same reason.
	Shadow atomic.Uint64
	Kick   atomic.Uint32
	// Device contexts (ABI 1.5), appended for the same reason. CtxKicks:
	// the register file sets bit id-1 for a kick of context id
	// (abi.RegContextKick) before it signals; the worker swaps the mask
	// to 0 and rings each context named.
	CtxKicks atomic.Uint64
	// Rung is 1 when the register file published a doorbell or kick of
	// the default ring since the worker last looked (a signal may carry
	// context kicks only). A vgpud that predates contexts never sets it,
	// but it never starts a worker that reads it either.
	Rung atomic.Uint32
	// The live device contexts (bit id-1), those lost among them, and the
	// device bytes each one's buffers hold (CtxMem[id-1]), written by the
	// worker, for the operator (vgpuctl show).
	CtxLive atomic.Uint64
	CtxLost atomic.Uint64
	CtxMem  [64]atomic.Uint64
	// Turns counts the device turns the instance's ring was granted
	// (turns.go "Many commands per turn"): with Stats.Commands, how many
	// commands a turn carried. A vgpud that predates it leaves it 0.
	Turns atomic.Uint64
	// Pipelined counts the launches enqueued without a wait of their own
	// (pipeline.go).
	Pipelined atomic.Uint64
	// KernelLimit and BuildLimit are the instance's kernel limit and
	// build budget in nanoseconds (0: none), written by the main process
	// after the instance was added to its worker and whenever they
	// change. A worker bounds the calls to its device contexts' executors
	// below them (docs/isolation.md "Executors"), so that a hung executor
	// ends its own context before the main process's watchdog ends the
	// whole worker. A vgpud that predates them leaves them 0: the worker
	// then bounds nothing itself.
	KernelLimit atomic.Int64
	BuildLimit  atomic.Int64
	// Poll-then-block (issue 42, docs/worker.md "Instance page"). The
	// main process writes PollWindow (nanoseconds; 0: never poll) with
	// the limits. A worker's ring loop that has run out of commands
	// looks at the page for that long before it blocks on the doorbell
	// eventfd, and says so in PollUntil: the CLOCK_MONOTONIC nanosecond
	// until which it (or a loop of the same instance) will look at the
	// page again before blocking, 0 once it is about to block. While
	// PollUntil is ahead of the clock, the main process publishes a
	// doorbell or kick without signalling the eventfd: the worker finds
	// it without a wake-up. Each side stores its own word before it
	// loads the other's (sequentially consistent atomics), so a doorbell
	// is either signalled or seen by the loop's last look; a PollUntil
	// left by a worker that died runs out by itself. A worker that lies
	// in PollUntil delays only its own doorbells.
	PollWindow atomic.Int64
	PollUntil  atomic.Int64
	// Signals counts the doorbell-eventfd signals the main process sent;
	// Polled, the doorbells and kicks it published without one (the
	// worker was polling); PollNanos, the time the worker's loops spent
	// polling. Counters only: neither side acts on the other's.
	Signals   atomic.Uint64
	Polled    atomic.Uint64
	PollNanos atomic.Uint64
	// TurnWanted is set to 1 by the main process when another instance
	// waits for the device while this one holds a turn, or was granted
	// one while others waited (sched.Scheduler.SetContended); the worker
	// clears it before it asks for a turn. A turn kept across commands
	// is renewed past its hold only while it is 0 (turns.go). A worker
	// that ignores it keeps a turn no longer than its kernel limit lets
	// it anyway (the main process's watchdog).
	TurnWanted atomic.Uint32
	// Renewals counts the kept turns renewed past their hold.
	Renewals atomic.Uint64
	// Transfers counts the device transfers of copies; Staged, the bytes
	// of them that went through the staging buffer rather than straight
	// from or to guest RAM (exec.go move).
	Transfers atomic.Uint64
	Staged    atomic.Uint64
	// InPlace counts the batches of copies moved in place, between guest
	// RAM and a host-backed buffer's memory, with no device transfer and
	// no device turn (exec.go move). Appended last, as the fields above.
	InPlace atomic.Uint64
	// TurnOffer is a free device turn parked at the instance by the main
	// process's scheduler (sched/offer.go, docs/worker.md "Instance
	// page"): the offer's number times 4, plus offerParked while it may be
	// taken or offerTaken once the worker took it (TakeTurn); 0: none.
	// The main process parks (ParkTurn) and revokes (RevokeTurn) it; the
	// worker's ring loop takes it for the first command of a doorbell
	// instead of asking for a turn. Each side reads the word once per
	// step and acts only on the values it expects: a worker that writes
	// anything else has no turn taken in the main process's books (it may
	// use its device without one anyway: what bounds it is the watchdog
	// and preemption, which do not rely on the word). Appended last.
	TurnOffer atomic.Uint64
	// RingShadow and RingPollWord are the tail shadow and poll word of
	// the ring the guest is enabling (ABI 1.6, mmio.RingConfig), written
	// by the main process before it sends the worker Enable: the worker
	// latches them with the ring (checked there as any guest address).
	// A worker that predates them never polls the shadow nor writes the
	// poll word, which the guest zeroed: the guest then kicks every
	// time, as before. ShadowTails counts the tails the worker's loops
	// found in the shadow by polling, with no kick. Appended last.
	RingShadow   atomic.Uint64
	RingPollWord atomic.Uint64
	ShadowTails  atomic.Uint64
	// Kicks a worker takes itself (wire.Kicks, docs/worker.md "Kicks
	// straight to the worker"): where the transport backs abi.RegRingKick
	// with an eventfd (vfio-user's ioeventfd), the main process hands the
	// worker that eventfd and each signal of it is a kick that never
	// passes through the register file. KickShadow is the tail shadow's
	// address as the guest last programmed it (RegTailShadowLo/Hi, 0
	// after a reset), written by the main process: the worker reads the
	// tail at that address as for a kick published in Shadow. A worker
	// that writes it misdirects only its own instance's kicks (it maps
	// that guest's RAM anyway); the main process never reads guest RAM
	// at it. DirectKicks counts the signals the worker took so;
	// RelayedKicks, those the main process took while no worker could
	// (a relocation's freeze, a lost worker, a worker of an earlier
	// release). Appended last.
	KickShadow   atomic.Uint64
	DirectKicks  atomic.Uint64
	RelayedKicks atomic.Uint64
}

// TurnOffer's states, below the offer's number.
const (
	offerParked = 1
	offerTaken  = 2
	offerState  = 3
)

// ParkTurn parks free turn gen (below 2^62) at the instance.
func (s *Shared) ParkTurn(gen uint64) { s.TurnOffer.Store(gen<<2 | offerParked) }

// RevokeTurn takes offer gen back and reports whether the worker had
// taken it.
func (s *Shared) RevokeTurn(gen uint64) (taken bool) {
	if s.TurnOffer.CompareAndSwap(gen<<2|offerParked, 0) {
		return false
	}
	return s.TurnOffer.Load() == gen<<2|offerTaken
}

// TurnParked reports whether a free turn is parked at the instance.
func (s *Shared) TurnParked() bool { return s.TurnOffer.Load()&offerState == offerParked }

// TakeTurn takes the free turn parked at the instance, if any, and
// returns its number.
func (s *Shared) TakeTurn() (gen uint64, ok bool) {
	v := s.TurnOffer.Load()
	if v&offerState != offerParked || !s.TurnOffer.CompareAndSwap(v, v&^offerState|offerTaken) {
		return 0, false
	}
	return v >> 2, true
}

// MaxPollWindow bounds the poll window a worker accepts from its page.
const MaxPollWindow = 10 * time.Second

// PollWindowNow returns PollWindow, bounded to [0, MaxPollWindow].
func (s *Shared) PollWindowNow() time.Duration {
	return min(max(time.Duration(s.PollWindow.Load()), 0), MaxPollWindow)
}

// Polling reports whether a worker's loop will look at the page again
// before it blocks: a doorbell published now needs no signal. The caller
// has stored what it publishes before it asks.
func (s *Shared) Polling() bool { return s.PollUntil.Load() > Monotonic() }

// Monotonic returns CLOCK_MONOTONIC in nanoseconds: a clock that the main
// process and its workers read alike. It is read once and then followed
// with the runtime's monotonic clock (CLOCK_MONOTONIC too), without a
// system call: the main process reads it at every doorbell.
func Monotonic() int64 { return monoBase + int64(time.Since(timeBase)) }

var monoBase, timeBase = rawMonotonic(), time.Now()

func rawMonotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// TimeLimits returns KernelLimit and BuildLimit as durations; a negative
// value (a lying peer wrote it) reads as none.
func (s *Shared) TimeLimits() (kernel, build time.Duration) {
	return time.Duration(max(s.KernelLimit.Load(), 0)), time.Duration(max(s.BuildLimit.Load(), 0))
}

// LiveContexts counts the live device contexts (CtxLive's bits).
func (s *Shared) LiveContexts() uint32 { return uint32(bits.OnesCount64(s.CtxLive.Load())) }

// KernelBuckets is the number of buckets of a KernelHist: bucket b counts
// launches of [2^(b-1), 2^b) microseconds (bucket 0: under 1 us), the last
// one everything longer.
const KernelBuckets = 24

// KernelHist is a log2 histogram of kernel lengths with each bucket's sum,
// and the work items launched, for the placement features
// (docs/placement.md "Features").
type KernelHist struct {
	Count     [KernelBuckets]atomic.Uint64
	Nanos     [KernelBuckets]atomic.Uint64
	WorkItems atomic.Uint64 // summed over the launches counted
}

// KernelBucket returns the bucket of a launch of ns nanoseconds.
func KernelBucket(ns uint64) int {
	return min(bits.Len64(ns/1000), KernelBuckets-1)
}

// Observe counts one launch of ns nanoseconds over items work items.
func (h *KernelHist) Observe(ns, items uint64) {
	b := KernelBucket(ns)
	h.Count[b].Add(1)
	h.Nanos[b].Add(ns)
	h.WorkItems.Add(items)
}

// Identification of an initialised Shared.
const (
	SharedMagic   = 0x76675348 // "HSgv"
	SharedVersion = 1
)

// SharedSize is the bytes a Shared takes; it fits in one page (tested).
const SharedSize = int(unsafe.Sizeof(Shared{}))

// NewShared returns an initialised Shared on the heap.
func NewShared() *Shared {
	s := &Shared{}
	s.Magic, s.Version = SharedMagic, SharedVersion
	return s
}

// SharedIn returns the Shared at the start of mem (a mapping of at least
// SharedSize bytes, 8-byte aligned, that outlives every use of the
// result). init zeroes and initialises it; otherwise it must hold an
// initialised Shared of this version.
func SharedIn(mem []byte, init bool) (*Shared, error) {
	if len(mem) < SharedSize || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, fmt.Errorf("shared instance state: %d bytes at a misaligned or short mapping (want %d)", len(mem), SharedSize)
	}
	s := (*Shared)(unsafe.Pointer(unsafe.SliceData(mem)))
	if init {
		clear(mem[:SharedSize])
		s.Magic, s.Version = SharedMagic, SharedVersion
	} else if s.Magic != SharedMagic || s.Version != SharedVersion {
		return nil, fmt.Errorf("shared instance state: magic %#x version %d, want %#x %d", s.Magic, s.Version, SharedMagic, SharedVersion)
	}
	return s, nil
}

// Error returns the latched error (an unknown code, which only a peer that
// lies could write, reads as StatusDeviceError) and the error count.
func (s *Shared) Error() (abi.Status, uint32) {
	st := abi.Status(s.ErrStatus.Load())
	if int(st) >= abi.NumStatus {
		st = abi.StatusDeviceError
	}
	return st, s.ErrCount.Load()
}

// Latch records a device-level error.
func (s *Shared) Latch(st abi.Status) {
	s.ErrStatus.Store(uint32(st))
	s.ErrCount.Add(1)
}

// Stats are an instance's counters, safe to read at any time.
type Stats struct {
	Commands     atomic.Uint64
	Errors       atomic.Uint64
	BytesToDev   atomic.Uint64
	BytesFromDev atomic.Uint64
	Launches     atomic.Uint64
	KernelNanos  atomic.Uint64
	Doorbells    atomic.Uint64
	statusCounts [abi.NumStatus]atomic.Uint64
}

// ByStatus returns how many commands completed with status s.
func (s *Stats) ByStatus(st abi.Status) uint64 {
	if int(st) >= len(s.statusCounts) {
		return 0
	}
	return s.statusCounts[st].Load()
}

// StatsCopy is a plain copy of Stats' counters.
type StatsCopy struct {
	Commands, Errors, BytesToDev, BytesFromDev, Launches, KernelNanos, Doorbells uint64
	ByStatus                                                                     [abi.NumStatus]uint64
}

// Copy reads every counter.
func (s *Stats) Copy() StatsCopy {
	c := StatsCopy{Commands: s.Commands.Load(), Errors: s.Errors.Load(), BytesToDev: s.BytesToDev.Load(),
		BytesFromDev: s.BytesFromDev.Load(), Launches: s.Launches.Load(), KernelNanos: s.KernelNanos.Load(),
		Doorbells: s.Doorbells.Load()}
	for i := range s.statusCounts {
		c.ByStatus[i] = s.statusCounts[i].Load()
	}
	return c
}

// Add adds c to the counters: an instance whose device state moved to a
// fresh worker keeps counting from where it was.
func (s *Stats) Add(c StatsCopy) {
	s.Commands.Add(c.Commands)
	s.Errors.Add(c.Errors)
	s.BytesToDev.Add(c.BytesToDev)
	s.BytesFromDev.Add(c.BytesFromDev)
	s.Launches.Add(c.Launches)
	s.KernelNanos.Add(c.KernelNanos)
	s.Doorbells.Add(c.Doorbells)
	for i := range s.statusCounts {
		s.statusCounts[i].Add(c.ByStatus[i])
	}
}
