package worker

import (
	"errors"
	"time"

	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mmio"
)

// Errors callers tell apart with errors.Is.
var (
	// ErrLost is wrapped by operations on an instance whose worker process
	// ended; the instance's errors read abi.StatusDeviceLost until a reset
	// brings it back on a fresh worker.
	ErrLost = errors.New("instance's worker process ended")
	// ErrPoolClosed is returned by a closed Pool.
	ErrPoolClosed = errors.New("worker pool closed")
	// ErrWorker wraps a worker's failure to start or to follow the
	// protocol (the process is ended).
	ErrWorker = errors.New("worker process failed")
)

// Limits are an instance's quotas and time budgets, changeable at run time.
type Limits struct {
	Profile      string // the profile name the guest reads
	MemBytes     uint64 // device memory quota
	ProgramBytes uint64 // bytes of programs (source, options, binaries) it may hold
	ComputeUnits uint32 // 0: the device's
	// KernelTimeout bounds how long one device turn (a launch or launch
	// slice, a copy chunk) may run, the time it was stopped by preemptions
	// excluded: a worker whose turn overruns it is ended (0: no bound).
	KernelTimeout time.Duration
	// Slice is how long a turn may run while another domain's instance
	// waits before it is preempted (0: never; docs/scheduler.md).
	Slice time.Duration
	// BuildTimeout bounds one program build (0: no bound).
	BuildTimeout time.Duration
	// Contexts is how many device contexts (ABI 1.5) the instance offers
	// besides its default one, at most abi.MaxContexts; fixed when the
	// instance is made (SetLimits does not change it).
	Contexts uint32
}

// InstanceConfig describes a new instance.
type InstanceConfig struct {
	ID     string // the instance's UUID
	Device int    // index of the physical device
	// Domain is the trust (reuse) domain: instances of one domain share a
	// worker process per device and, with Reuse, results. Shared marks an
	// operator-named domain (cryptographic digests).
	Domain string
	Shared bool
	Reuse  bool
	Limits Limits
	// Notify is called after completions are visible in guest RAM (the
	// hook for interrupts and guest wake-ups), with the last completed
	// index, and when the instance's device context is lost. It must not
	// block.
	Notify func(index uint32)
}

// Backend is one vGPU's device state as vgpud's main process holds it:
// the register file's backend (mmio.Backend), the sink of the guest-RAM map
// its transport receives, its counters. The default Backend's state lives
// in a worker process; the in-process one (Config.InProcess) is the unsafe
// baseline for benchmarks.
type Backend interface {
	mmio.Backend
	// Update replaces the instance's guest-RAM map; it takes ownership of
	// the regions' fds, which must be sealed against shrinking.
	Update(regions []guestmem.Region) error
	// Shared is the instance's register-visible state and counters. Values
	// a worker wrote are untrusted: counters to show, nothing to index by.
	Shared() *aggregator.Shared
	// SetLimits changes the quotas and time budgets (abi.StatusBusy when
	// the instance holds more memory than the new quota).
	SetLimits(l Limits) error
	// SetReuse turns result reuse on or off within the instance's domain.
	SetReuse(on bool) error
	// Domain is the instance's trust domain.
	Domain() string
	// Move puts the instance in another trust domain (its worker). Only an
	// instance that holds no buffer or program can move (abi.StatusBusy
	// otherwise): its device context is not carried over; it starts
	// afresh, its ring disabled.
	Move(domain string, shared bool) error
	// Lost reports whether the instance's device context is gone.
	Lost() bool
	// Close frees the instance's device state.
	Close() error
}
