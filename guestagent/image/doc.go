// Package image builds the initramfs of the vgpud test guest: a newc cpio
// archive holding the static /init (guestagent/cmd/vgpu-init), the guest
// programs under /bin, the kernel modules under /lib/modules, the mount
// points the init uses and a /dev/console node (docs/guest-image.md).
//
// The output is deterministic: entries are sorted by path, owned by root,
// with mtime 0 and inode numbers given in order, so the same inputs produce
// the same bytes.
//
// It owns only the archive layout; it knows nothing of QEMU, the kernel
// command line or what the programs inside do.
package image
