package guestmemtest

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
)

// mapScattered returns one contiguous local buffer whose i-th page is the
// page of fd at offset gpas[i] (guest RAM is mapped at offset == gpa), the
// way a guest's virtual memory maps scattered physical pages.
func mapScattered(fd int, gpas []uint64) ([]byte, error) {
	size := uintptr(len(gpas)) * abi.PageSize
	base, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes: %w", size, err)
	}
	for i := 0; i < len(gpas); {
		j := i + 1
		for j < len(gpas) && gpas[j] == gpas[j-1]+abi.PageSize {
			j++
		}
		at := unsafe.Add(base, uintptr(i)*abi.PageSize)
		_, err := unix.MmapPtr(fd, int64(gpas[i]), at, uintptr(j-i)*abi.PageSize,
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			unix.MunmapPtr(base, size)
			return nil, fmt.Errorf("map guest pages at %#x: %w", gpas[i], err)
		}
		i = j
	}
	return unsafe.Slice((*byte)(base), size), nil
}

// unmapScattered releases a buffer from mapScattered.
func unmapScattered(b []byte) {
	if len(b) > 0 {
		unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
	}
}
