// Package xenctl is the real xen.Hypervisor for a Linux dom0 (or a
// driver domain with the device-model privilege over the guest): the
// operations of libxendevicemodel, libxenforeignmemory and libxenevtchn
// issued directly as ioctls on /dev/xen/privcmd (IOCTL_PRIVCMD_DM_OP,
// IOCTL_PRIVCMD_MMAP_RESOURCE, IOCTL_PRIVCMD_MMAPBATCH_V2,
// IOCTL_PRIVCMD_RESTRICT) and /dev/xen/evtchn, in pure Go, so vgpud needs
// no Xen libraries at build or run time.
//
// The structure layouts and ioctl numbers are those of Xen 4.17's public
// headers (xen/hvm/dm_op.h) and Linux's privcmd and evtchn uapi headers;
// TestLayoutAgainstHeaders compiles them with the installed headers
// (Debian: libxen-dev) and compares, where a C compiler and the headers
// are present. Nothing here has run under Xen: see docs/xen.md.
package xenctl
