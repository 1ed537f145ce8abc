package mmio

import "github.com/vgpud/vgpud/abi"

// Limits are the read-only device limits the register file exposes.
type Limits struct {
	MemBytes     uint64 // device memory quota (profile)
	MaxAlloc     uint64 // largest single buffer
	ComputeUnits uint32
	MaxWorkGroup uint32
	ProfileName  string // truncated to abi.ProfileNameLen
	DeviceName   string // truncated to abi.DeviceNameLen
	// Contexts is how many device contexts the instance offers besides
	// its default one (abi.RegMaxContexts, ABI 1.5), at most
	// abi.MaxContexts.
	Contexts uint32
}

// RingConfig is what the guest programmed before setting RingCtrlEnable.
type RingConfig struct {
	Base      uint64 // guest-physical address of the command ring
	ComplBase uint64 // guest-physical address of the completion array
	Slots     uint32
	// Shadow and PollWord (ABI 1.6, abi.FeatureNotify): the tail shadow
	// and the poll word the guest programmed before it enabled the ring,
	// when it programmed a poll word (0 and 0 otherwise): a backend whose
	// ring loop polls reads the shadow while it says so in the poll word.
	Shadow   uint64
	PollWord uint64
}

// Featured is implemented by a Backend that offers less than this
// release's abi.Features (a worker of an earlier release, adopted in an
// upgrade in place): RegFeatures reads what ABIFeatures returns.
type Featured interface {
	ABIFeatures() uint32
}

// Backend is the device behind the register file: the aggregator's
// per-instance state. Every method must return promptly: they run on the
// transport's thread while a vCPU waits for the access to complete.
// Errors carry an abi.Status (abi.StatusOf); the register file latches it
// into RegError.
type Backend interface {
	Limits() Limits
	// EnableRing validates cfg against guest memory and starts fetching
	// at index 0. It fails with StatusBusy while earlier work is pending.
	EnableRing(cfg RingConfig) error
	// DisableRing stops fetching; commands already fetched still complete.
	DisableRing()
	// RingEnabled reports whether the ring is fetching. The backend is the
	// one truth: it stops the ring by itself after a fault.
	RingEnabled() bool
	// Doorbell publishes a new producer index. It never waits for the work.
	Doorbell(tail uint32) error
	// Kick is Doorbell with the producer index read from the 4-byte
	// little-endian word at guest-physical address shadow (abi.RegRingKick):
	// the backend reads guest RAM, the register file cannot. A shadow
	// outside guest RAM or misaligned is StatusBadAddress.
	Kick(shadow uint64) error
	// ContextKick is the doorbell of device context id (abi.RegContextKick,
	// ABI 1.5; 1 <= id <= Limits().Contexts, checked by the register
	// file): the backend reads the context's tail from its shadow word.
	// An id that names no live context is StatusNotFound.
	ContextKick(id uint32) error
	// Head and Done are the fetched and completed command counts.
	Head() uint32
	Done() uint32
	// Reset frees every buffer and program and drops pending commands.
	Reset()
	// Error returns the latched device error (StatusOK if none) and the
	// number of errors since reset; errors found asynchronously (a ring
	// entry that became unreadable) are latched here by the backend.
	Error() (abi.Status, uint32)
	// LatchError records a device-level error found by the register file.
	LatchError(abi.Status)
	// AckError clears the latched error.
	AckError()
}

// KickTaker is a Backend that can read a transport's kick eventfd itself
// (abi.RegRingKick backed by an ioeventfd: vfio-user's REGION_IO_FDS):
// each signal of it is a kick that never passes through the register
// file, taken where the ring runs (a worker process) with no hop through
// vgpud's main process. The register file tells it the tail shadow's
// address each time the guest programs it, and 0 at a reset.
type KickTaker interface {
	// TakeKicks makes fd the kick eventfd the backend reads from now on
	// (a copy: the caller keeps fd); -1 lets go of the last one. An
	// error says the backend cannot: the transport then watches fd and
	// writes abi.RegRingKick itself.
	TakeKicks(fd int) error
	// TailShadow is the tail shadow's address as the guest programmed it
	// (RegTailShadowLo/Hi).
	TailShadow(addr uint64)
}
