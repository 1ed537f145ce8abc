package guestmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// IoctlPrivcmdMmapBatchV2 is IOCTL_PRIVCMD_MMAPBATCH_V2 (Linux
// include/uapi/xen/privcmd.h): _IOC(_IOC_NONE, 'P', 4, sizeof(struct
// privcmd_mmapbatch_v2)), the one privcmd request the mapcache makes
// (the worker's seccomp filter allows exactly it; xen/xenctl checks the
// number against the installed headers).
const IoctlPrivcmdMmapBatchV2 = 'P'<<8 | 4 | sizeofMmapBatchV2<<16

// struct privcmd_mmapbatch_v2 on 64-bit Linux: unsigned int num; domid_t
// dom; (pad) __u64 addr; const xen_pfn_t *arr; int *err.
const sizeofMmapBatchV2 = 32

// privcmdMapper maps a domain's frames through a privcmd fd: mmap of
// the fd reserves a range, IOCTL_PRIVCMD_MMAPBATCH_V2 fills it (privcmd
// requires the ioctl to cover exactly one fresh mmap of the fd).
type privcmdMapper struct {
	fd  int
	dom uint16
}

// NewPrivcmdMapper is the real FrameMapper: fd is an open
// /dev/xen/privcmd, normally restricted to dom (IOCTL_PRIVCMD_RESTRICT)
// by whoever opened it. It owns fd from now on, also on error. It cannot
// run without Xen; the mapcache's logic is tested with a fake.
func NewPrivcmdMapper(fd int, dom uint16) (FrameMapper, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("privcmd fd %d: fstat: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		unix.Close(fd)
		return nil, fmt.Errorf("privcmd fd %d (mode %#o): %w: %w", fd, st.Mode, ErrForeignLayout, errNotPrivcmd)
	}
	return &privcmdMapper{fd: fd, dom: dom}, nil
}

func (p *privcmdMapper) MapFrames(gfns []uint64, errs []int32) ([]byte, error) {
	n := len(gfns)
	if n == 0 || len(errs) != n {
		return nil, fmt.Errorf("privcmd: map %d frames with %d error slots: %w", n, len(errs), unix.EINVAL)
	}
	mem, err := unix.Mmap(p.fd, 0, n*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("privcmd: reserve %d frames: %w", n, err)
	}
	// xen_pfn_t is unsigned long: 8 bytes on 64-bit Linux, as uint64.
	var arg [sizeofMmapBatchV2]byte
	binary.LittleEndian.PutUint32(arg[0:], uint32(n))
	binary.LittleEndian.PutUint16(arg[4:], p.dom)
	binary.LittleEndian.PutUint64(arg[8:], uint64(uintptr(unsafe.Pointer(&mem[0]))))
	binary.LittleEndian.PutUint64(arg[16:], uint64(uintptr(unsafe.Pointer(&gfns[0]))))
	binary.LittleEndian.PutUint64(arg[24:], uint64(uintptr(unsafe.Pointer(&errs[0]))))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(p.fd), IoctlPrivcmdMmapBatchV2, uintptr(unsafe.Pointer(&arg)))
	runtime.KeepAlive(gfns)
	runtime.KeepAlive(errs)
	// ENOENT: some frames were paged out; errs says which (each frame
	// refused has its negative errno there, with or without ENOENT).
	// Any other error fails the whole batch.
	if errno != 0 && !errors.Is(errno, unix.ENOENT) {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("privcmd: IOCTL_PRIVCMD_MMAPBATCH_V2 domain %d, %d frames from %#x: %w", p.dom, n, gfns[0], errno)
	}
	return mem, nil
}

func (p *privcmdMapper) Unmap(mem []byte) error {
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("privcmd: unmap: %w", err)
	}
	return nil
}

func (p *privcmdMapper) Close() error {
	if err := unix.Close(p.fd); err != nil {
		return fmt.Errorf("privcmd: close: %w", err)
	}
	return nil
}
