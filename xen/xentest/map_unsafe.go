package xentest

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

// mapScattered returns one contiguous local buffer whose i-th page is the
// page of fd at offset gpas[i] (guest RAM is the memfd at offset == gpa),
// the way a guest's page tables or a foreign mapping join scattered
// frames.
func mapScattered(fd int, gpas []uint64, prot int) ([]byte, error) {
	size := uintptr(len(gpas)) * pageSize
	base, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes: %w", size, err)
	}
	for i := 0; i < len(gpas); {
		j := i + 1
		for j < len(gpas) && gpas[j] == gpas[j-1]+pageSize {
			j++
		}
		at := unsafe.Add(base, uintptr(i)*pageSize)
		if _, err := unix.MmapPtr(fd, int64(gpas[i]), at, uintptr(j-i)*pageSize, prot, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			unix.MunmapPtr(base, size)
			return nil, fmt.Errorf("map guest pages at %#x: %w", gpas[i], err)
		}
		i = j
	}
	return unsafe.Slice((*byte)(base), size), nil
}

// unmap releases a buffer from mapScattered.
func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
}

const protRW = unix.PROT_READ | unix.PROT_WRITE
