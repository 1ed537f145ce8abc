package mdev

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// Profile is a vGPU type: what one instance of it gets of a physical device.
type Profile struct {
	Name string `json:"name"`
	// MemBytes is the device memory quota of an instance.
	MemBytes uint64 `json:"mem_bytes"`
	// Share is the instance's weight when the device is contended.
	Share uint32 `json:"share"`
	// MaxPerDevice bounds instances of this profile on one physical device.
	MaxPerDevice int `json:"max_per_device"`
	// ProgramBytes bounds the programs an instance holds (source, options
	// and built binaries); 0: DefaultProgramBytes.
	ProgramBytes uint64 `json:"program_bytes,omitempty"`
	// KernelTimeout bounds how long one device turn of an instance (a
	// launch or slice of one, a copy chunk) may run, the time it was
	// preempted excluded: a worker whose turn runs longer is ended and its
	// domain's instances lose their device context (docs/isolation.md,
	// docs/scheduler.md). 0: TurnTimeout, or DefaultKernelTimeout.
	KernelTimeout Duration `json:"kernel_timeout,omitempty"`
	// TurnTimeout is KernelTimeout's former name, still read from
	// configurations and state files; KernelTimeout wins when both are
	// set. A profile in use carries its value in KernelTimeout only.
	TurnTimeout Duration `json:"turn_timeout,omitempty"`
	// Slice is how long one turn of an instance may run while another
	// domain's instance waits for the device before it is preempted
	// (docs/scheduler.md); 0: DefaultSlice.
	Slice Duration `json:"slice,omitempty"`
	// BuildTimeout bounds one program build of an instance the same way;
	// 0: DefaultBuildTimeout.
	BuildTimeout Duration `json:"build_timeout,omitempty"`
	// Overcommit is what an instance's allocation that fits MemBytes but
	// not its physical device does (docs/overcommit.md); the zero value:
	// it fails (none). Changeable at run time (SetProfileOvercommit).
	Overcommit Overcommit `json:"overcommit,omitzero"`
	// Contexts is how many device contexts (ABI 1.5, docs/ABI.md "Device
	// contexts") an instance offers besides its default one, 0..64: a
	// guest driver gives each process its own, so that one process's
	// kernels reach none of another's buffers (docs/isolation.md). 0:
	// none, the guest has its one ring (what a profile written before
	// contexts existed means). Fixed for an instance's life.
	Contexts uint32 `json:"contexts,omitempty"`
}

// Defaults of the profile settings left 0.
const (
	DefaultProgramBytes  = 64 << 20
	DefaultKernelTimeout = 5 * time.Minute
	DefaultSlice         = 250 * time.Millisecond
	DefaultBuildTimeout  = 60 * time.Second
)

// MinSlice is the shortest slice a profile or an instance may have: each
// preemption stops and continues a worker process.
const MinSlice = 10 * time.Millisecond

// withDefaults fills the settings left 0.
func (p Profile) withDefaults() Profile {
	if p.ProgramBytes == 0 {
		p.ProgramBytes = DefaultProgramBytes
	}
	p.KernelTimeout, p.TurnTimeout = Duration(p.kernelTimeout()), 0
	if p.Slice == 0 {
		p.Slice = Duration(DefaultSlice)
	}
	if p.BuildTimeout == 0 {
		p.BuildTimeout = Duration(DefaultBuildTimeout)
	}
	return p
}

// kernelTimeout is the profile's kernel limit: KernelTimeout, else its
// former name TurnTimeout, else the default.
func (p Profile) kernelTimeout() time.Duration {
	switch {
	case p.KernelTimeout != 0:
		return p.KernelTimeout.D()
	case p.TurnTimeout != 0:
		return p.TurnTimeout.D()
	}
	return DefaultKernelTimeout
}

// slice is the profile's slice, or the default.
func (p Profile) slice() time.Duration {
	if p.Slice != 0 {
		return p.Slice.D()
	}
	return DefaultSlice
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("10s", "500ms").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Validate checks p for use.
func (p Profile) Validate() error {
	switch {
	case p.Name == "" || len(p.Name) > abi.ProfileNameLen || strings.ContainsFunc(p.Name, func(r rune) bool { return r <= ' ' || r > '~' }):
		return fmt.Errorf("profile name %q: want 1-%d printable ASCII characters", p.Name, abi.ProfileNameLen)
	case p.MemBytes < 1<<20:
		return fmt.Errorf("profile %s: memory %d below 1 MiB", p.Name, p.MemBytes)
	case p.Share == 0:
		return fmt.Errorf("profile %s: share 0", p.Name)
	case p.MaxPerDevice <= 0:
		return fmt.Errorf("profile %s: max_per_device %d", p.Name, p.MaxPerDevice)
	case p.KernelTimeout < 0 || p.TurnTimeout < 0 || p.BuildTimeout < 0:
		return fmt.Errorf("profile %s: negative timeout (kernel %v, build %v)", p.Name, p.kernelTimeout(), p.BuildTimeout.D())
	case p.Slice != 0 && p.Slice.D() < MinSlice:
		return fmt.Errorf("profile %s: slice %v below %v", p.Name, p.Slice.D(), MinSlice)
	case p.Contexts > abi.MaxContexts:
		return fmt.Errorf("profile %s: %d device contexts, at most %d", p.Name, p.Contexts, abi.MaxContexts)
	}
	if err := p.Overcommit.Validate(); err != nil {
		return fmt.Errorf("profile %s: %w", p.Name, err)
	}
	return nil
}

// DefaultProfiles are the built-in vGPU types, after the fixed fractions
// of a card that NVIDIA's vGPU profiles use.
func DefaultProfiles() []Profile {
	return []Profile{
		Profile{Name: "vgpu-small", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8, Contexts: abi.MaxContexts}.withDefaults(),
		Profile{Name: "vgpu-medium", MemBytes: 1 << 30, Share: 2, MaxPerDevice: 4, ProgramBytes: 128 << 20, Contexts: abi.MaxContexts}.withDefaults(),
		Profile{Name: "vgpu-large", MemBytes: 4 << 30, Share: 4, MaxPerDevice: 2, ProgramBytes: 256 << 20, Contexts: abi.MaxContexts}.withDefaults(),
	}
}

func sortedProfiles(m map[string]Profile) []Profile {
	out := make([]Profile, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Profile) int { return strings.Compare(a.Name, b.Name) })
	return out
}
