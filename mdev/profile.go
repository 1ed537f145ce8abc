package mdev

import (
	"fmt"
	"slices"
	"strings"

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
	}
	return nil
}

// DefaultProfiles are the built-in vGPU types, after the fixed fractions
// of a card that NVIDIA's vGPU profiles use.
func DefaultProfiles() []Profile {
	return []Profile{
		{Name: "vgpu-small", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8},
		{Name: "vgpu-medium", MemBytes: 1 << 30, Share: 2, MaxPerDevice: 4},
		{Name: "vgpu-large", MemBytes: 4 << 30, Share: 4, MaxPerDevice: 2},
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
