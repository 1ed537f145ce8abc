package driver

import "os"

// OpenGuest finds the vGPU (when pciDir is empty), enables and maps its
// BAR0 and returns it with the guest's pinned DMA memory: what every guest
// program does before Open. It also asks the kernel to leave locked pages
// alone during compaction (best effort: the knob needs root and a kernel
// that has it), since the device holds their physical addresses.
func OpenGuest(pciDir string) (Registers, Memory, error) {
	if pciDir == "" {
		p, err := FindPCI()
		if err != nil {
			return nil, nil, err
		}
		pciDir = p
	}
	regs, err := OpenPCI(pciDir)
	if err != nil {
		return nil, nil, err
	}
	_ = os.WriteFile("/proc/sys/vm/compact_unevictable_allowed", []byte("0"), 0)
	return regs, NewPagemapMemory(), nil
}
