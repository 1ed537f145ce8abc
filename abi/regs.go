package abi

// ABI version exposed in RegVersion (docs/ABI.md "Versioning"): major in the
// high 16 bits, minor in the low 16 bits. A guest driver must refuse a device
// whose major version differs from the one it was built for.
const (
	VersionMajor = 1
	VersionMinor = 10
	Version      = VersionMajor<<16 | VersionMinor
)

// PCI identity (docs/ABI.md "PCI identity").
const (
	// VendorID is not assigned by the PCI-SIG; vgpud devices are only ever
	// seen inside VMs, where no physical device can clash with it.
	VendorID          = 0x7667 // "gv"
	DeviceID          = 0x0001
	SubsystemVendorID = VendorID
	SubsystemID       = 0x0001
	Revision          = 0x01
	// ClassCode is display controller / 3D controller, programming interface 0.
	ClassCode = 0x030200
	// InterruptPin is INTA#.
	InterruptPin = 1
)

// BAR layout (docs/ABI.md "BAR layout").
const (
	// BAR0 holds the register file: 32-bit, non-prefetchable memory.
	BAR0Size = 4096
)

// Register offsets in BAR0 (docs/ABI.md "Registers"). Every register is
// 32 bits wide and must be accessed with naturally aligned 4-byte loads and
// stores; 64-bit quantities are split into _LO and _HI halves.
const (
	RegID           = 0x000 // RO: IDMagic
	RegVersion      = 0x004 // RO: Version
	RegFeatures     = 0x008 // RO: feature bits, Feature*
	RegStatus       = 0x00C // RO: StatusBit* bits
	RegMemSizeLo    = 0x010 // RO: device memory quota in bytes
	RegMemSizeHi    = 0x014
	RegMaxAllocLo   = 0x018 // RO: largest single buffer in bytes
	RegMaxAllocHi   = 0x01C
	RegComputeUnits = 0x020 // RO: compute units of the share
	RegMaxRingSlots = 0x024 // RO: MaxRingSlots
	RegMaxWorkGroup = 0x028 // RO: largest work-group size
	RegMaxContexts  = 0x02C // RO: device contexts the instance offers besides the default one (1.5, FeatureContexts)
	RegError        = 0x030 // RO: last device-level error (a Status)
	RegErrorCount   = 0x034 // RO: device-level errors since reset
	RegErrorAck     = 0x038 // WO: any write clears RegError and StatusBitError
	RegRingBaseLo   = 0x040 // RW: guest-physical address of the command ring
	RegRingBaseHi   = 0x044
	RegComplBaseLo  = 0x048 // RW: guest-physical address of the completion array
	RegComplBaseHi  = 0x04C
	RegRingSlots    = 0x050 // RW: slots in the ring (power of two)
	RegRingCtrl     = 0x054 // RW: RingCtrl* bits
	RegRingTail     = 0x058 // RW: doorbell; producer index (free-running)
	RegRingHead     = 0x05C // RO: commands fetched (free-running)
	RegRingDone     = 0x060 // RO: commands completed (free-running)
	RegIntStatus    = 0x064 // RW1C: Int* bits the device latched (1.1, FeatureINTx)
	RegIntEnable    = 0x068 // RW: Int* bits that assert INTA# (1.1, FeatureINTx)
	RegTailShadowLo = 0x06C // RW: guest-physical address of the tail shadow word (1.3, FeatureKick)
	RegTailShadowHi = 0x070
	RegRingKick     = 0x074 // WO: any write = doorbell with the tail read from the shadow (1.3, FeatureKick)
	RegContextKick  = 0x078 // WO: the value written names a context: its doorbell, the tail read from its shadow (1.5, FeatureContexts)
	RegProfileName  = 0x080 // RO: ProfileNameLen bytes, NUL padded
	RegDeviceName   = 0x0A0 // RO: DeviceNameLen bytes, NUL padded
	RegPollWordLo   = 0x0E0 // RW: guest-physical address of the poll word (1.6, FeatureNotify)
	RegPollWordHi   = 0x0E4

	ProfileNameLen = 32
	DeviceNameLen  = 64
)

// IDMagic is the value of RegID ("VGPU" in little-endian ASCII).
const IDMagic = 0x55504756

// RegStatus bits.
const (
	StatusBitRingEnabled = 1 << 0
	StatusBitError       = 1 << 1 // sticky until RegErrorAck is written
)

// RegRingCtrl bits.
const (
	// RingCtrlEnable, written as 1, validates the ring configuration and
	// starts fetching from index 0; written as 0 it stops fetching.
	RingCtrlEnable = 1 << 0
	// RingCtrlReset, written as 1, resets the device: the ring stops, all
	// buffers and programs of the instance are freed, pending commands are
	// dropped without completion records. Reads as 0.
	RingCtrlReset = 1 << 1
)

// RegFeatures bits (docs/ABI.md "Interrupts").
const (
	// FeaturesV1 is what RegFeatures reads in version 1.0: nothing.
	FeaturesV1 = 0
	// FeatureINTx (1.1): RegIntStatus and RegIntEnable exist and the device
	// asserts INTA# while RegIntStatus & RegIntEnable != 0.
	FeatureINTx = 1 << 0
	// FeatureKick (1.3): RegTailShadowLo/Hi and RegRingKick exist. The
	// guest keeps its producer index in a 4-byte little-endian word of
	// its RAM (the tail shadow) and writes any value to RegRingKick: the
	// device reads the tail from the shadow and treats it as a write of
	// that value to RegRingTail. A kick carries no value, so a transport
	// can back RegRingKick with an ioeventfd (vfio-user REGION_IO_FDS,
	// KVM) and the guest's store costs no round trip to vgpud.
	FeatureKick = 1 << 1
	// FeatureContexts (1.5): device contexts (docs/ABI.md "Device
	// contexts"): RegMaxContexts and RegContextKick exist and the default
	// context's ring takes OpContextCreate and OpContextDestroy. Each
	// context has its own ring, handle spaces, fault and memory charge,
	// and its kernels reach only its own buffers.
	FeatureContexts = 1 << 2
	// FeatureNotify (1.6): notification suppression (docs/ABI.md "Poll
	// word"): RegPollWordLo/Hi exist. A guest that programs a poll word
	// (a 4-byte word of its RAM, zeroed) and the tail shadow before it
	// enables the ring may skip the kick when, after storing the tail in
	// the shadow, it reads PollWordPolling there: the device is polling
	// the shadow and will see the tail without one.
	FeatureNotify = 1 << 3
	// FeaturePrintf (1.7): a launch may name a printf buffer (docs/ABI.md
	// "Printf output"), into which the device writes what the kernel
	// printed, with a header saying how much and whether it could
	// capture it at all.
	FeaturePrintf = 1 << 4
	// FeatureImages (1.8): images and samplers (docs/ABI.md "Images"): a
	// launch takes image (ArgImage) and sampler (ArgSampler) arguments,
	// and device-info answers a query for DeviceInfoVersionImages with
	// the image section, which says whether the physical device has
	// images, its limits and formats.
	FeatureImages = 1 << 5
	// FeatureIL (1.9): SPIR-V modules (docs/ABI.md "SPIR-V"): a
	// program-build with FlagIL builds its source as a SPIR-V module, and
	// device-info answers a query for DeviceInfoVersionIL with the
	// blob whose il word says whether the physical device takes SPIR-V.
	FeatureIL = 1 << 6
	// FeatureImageBuffers (1.10): images made from buffers (docs/ABI.md
	// "Images made from buffers"): a launch takes image arguments of
	// ImageType1DBuffer, and device-info answers a query for
	// DeviceInfoVersionImageBuffers with the blob whose image section
	// ends in the buffer part (the width limit and the formats of such
	// images).
	FeatureImageBuffers = 1 << 7
	// Features is what this version's RegFeatures reads.
	Features = FeatureINTx | FeatureKick | FeatureContexts | FeatureNotify | FeaturePrintf | FeatureImages | FeatureIL |
		FeatureImageBuffers
)

// Poll word values (1.6, FeatureNotify).
const (
	// PollWordIdle: the device may sleep; a tail stored in the shadow
	// needs a kick.
	PollWordIdle = 0
	// PollWordPolling: the device reads the tail shadow again before it
	// sleeps, and stores PollWordIdle before that last read.
	PollWordPolling = 1
)

// RegIntStatus and RegIntEnable bits (1.1). RegIntStatus bits latch
// whether or not they are enabled; writing 1 to a bit clears it.
const (
	// IntCompletion is set each time the device writes a completion record.
	IntCompletion = 1 << 0
	// IntAll is every defined bit; others read 0 and are ignored.
	IntAll = IntCompletion
)

// Ring geometry (docs/ABI.md "Command ring").
const (
	MaxRingSlots = 4096
	CommandSize  = 64
	ComplSize    = 32
	PageSize     = 4096
)

// Limits on guest-supplied sizes (docs/ABI.md "Limits").
const (
	MaxSourceLen     = 4 << 20 // program source bytes (1 MiB before 1.4)
	MaxOptionsLen    = 1024    // build options bytes
	MaxBuildLogLen   = 64 << 10
	MaxLaunchDescLen = 4096
	MaxKernelArgs    = 64
	MaxScalarSize    = 256
	KernelNameLen    = 64
	MaxSGEntries     = 1 << 20 // entries in one scatter-gather list, chains included
	MaxFillPattern   = 128     // buffer-fill pattern bytes (1.4)
	// MaxLaunchParamBytes is the most kernel-parameter bytes one launch
	// descriptor carries: 15 scalars by offset fill the 3952 bytes after
	// the header with their entries (15 × 16) and 3712 bytes of data;
	// any other mix carries less. The device-information blob's
	// max_parameter_size is at most this (1.4).
	MaxLaunchParamBytes = 3712
)
