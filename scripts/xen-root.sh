#!/usr/bin/env bash
# xen-root.sh DIR: build the Xen dom0 image for make test-xen (docs/xen.md,
# "Under real Xen"; issue 30): a Debian trixie root (minbase, systemd,
# udev, kmod, Debian's kernel, Xen 4.20: xen-system-amd64 with
# xen-hypervisor-4.20-amd64 and xen-utils-4.20, qemu-system-xen as the
# HVM guests' default device model) and PoCL (vgpud's OpenCL device in
# dom0), from the same Debian registry the
# host's apt uses, packed into an ext4 image. vgpud's binaries are not in
# it: scripts/test-xen.sh hands them over on a second disk at test time,
# and the image's xen-test.service runs that disk's run.sh.
#
# DIR holds:
#   xen            the hypervisor, uncompressed (QEMU's multiboot loader
#                  takes a 32-bit ELF, not Debian's xen-4.20-amd64.gz)
#   vmlinuz        dom0's kernel
#   initrd.img     dom0's initramfs
#   root.img       the root file system (ext4, label xenroot); boot it
#                  read-only or with QEMU's snapshot=on
#   .xen-root-stamp  the cache key and the package versions
#
# Cached like vmm-root.sh: the stamp's first line is a hash of this script
# and the library it sources; DIR.tmp is renamed to DIR last; concurrent
# runs for one DIR are serialised by a lock file.
#
# Needs root (debootstrap, chroot, mount) and the network (the registry).
set -euo pipefail

say() { echo "xen-root: $*" >&2; }
die() {
	echo "xen-root: $*" >&2
	exit 1
}

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
dir=$(realpath -m "$1")
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap, chroot and mount"

stampname=.xen-root-stamp
# shellcheck source=lib/apt-host.sh
. "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/lib/apt-host.sh"
key=$(build_key "${BASH_SOURCE[0]}")

uptodate() { [[ -f $dir/$stampname ]] && [[ $(head -n1 "$dir/$stampname") == "$key" ]]; }

if uptodate; then
	say "$dir is up to date"
	exit 0
fi
lock_build "$dir"

export DEBIAN_FRONTEND=noninteractive
ensure_debootstrap
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 missing (e2fsprogs)"

codename=$(host_codename)
mirror=${XEN_ROOT_MIRROR:-}
security=${XEN_ROOT_SECURITY_MIRROR:-}
if [[ -z $mirror && -n $codename ]]; then
	mirror=$(host_mirror "$codename")
fi
if [[ -z $security && -n $codename ]]; then
	security=$(host_mirror "$codename-security")
fi
[[ -n $mirror ]] || die "no Debian mirror found in the host's apt sources (host release: ${codename:-not Debian}); set XEN_ROOT_MIRROR to one"
mirror=${mirror%/}
security=${security%/}
say "mirror $mirror${security:+, security $security}"

tmp=$dir.tmp
fresh_dir "$tmp"
mkdir -p "$tmp"
rootfs=$tmp/rootfs

start=$SECONDS
say "debootstrap trixie into $rootfs"
logged "$dir.debootstrap.log" debootstrap debootstrap --variant=minbase trixie "$rootfs" "$mirror"

debian_sources "$rootfs" "$mirror" "$security" "trixie trixie-updates"
no_services "$rootfs"

say "installing the kernel, systemd and Xen 4.20 (trixie)"
logged "$dir.install.log" "installing into the root" root_apt "$rootfs" '
	inroot "${apt[@]}" install systemd-sysv udev kmod e2fsprogs procps iproute2 less \
		linux-image-amd64 initramfs-tools \
		xen-system-amd64 xen-hypervisor-4.20-amd64 xen-utils-4.20 qemu-system-xen \
		ocl-icd-libopencl1 pocl-opencl-icd
'
rm -f "$rootfs/usr/sbin/policy-rc.d"

# The boot pieces.
xengz=$(find "$rootfs/boot" -maxdepth 1 -name 'xen-4.20*-amd64.gz' | sort | tail -n1)
[[ -n $xengz ]] || die "no xen-4.20*-amd64.gz in the root's /boot"
gzip -dc "$xengz" >"$tmp/xen"
kernel=$(find "$rootfs/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
[[ -n $kernel ]] || die "no vmlinuz in the root's /boot"
kver=${kernel##*/vmlinuz-}
cp "$kernel" "$tmp/vmlinuz"
cp "$rootfs/boot/initrd.img-$kver" "$tmp/initrd.img"

# The system: root on /dev/vda (read-only in the image's use: QEMU's
# snapshot=on), no password for root, a login on dom0's console, and the
# test hook: a disk labelled xentest is mounted at /xentest and its run.sh
# runs once the Xen daemons are up (Debian's xen.service: modules,
# xenstored, xenconsoled).
echo xendom0 >"$rootfs/etc/hostname"
printf 'LABEL=xenroot / ext4 rw,errors=remount-ro 0 1\n' >"$rootfs/etc/fstab"
chroot "$rootfs" passwd -d root >/dev/null
mkdir -p "$rootfs/xentest"
cat >"$rootfs/etc/systemd/system/xen-test.service" <<'EOF'
[Unit]
Description=vgpud's Xen test (the xentest disk's run.sh)
ConditionPathExists=/dev/disk/by-label/xentest
After=xen.service xen-init-dom0.service xenstored.service xenconsoled.service local-fs.target
Wants=xen.service

[Service]
Type=oneshot
ExecStartPre=/bin/mount /dev/disk/by-label/xentest /xentest
ExecStart=/bin/sh -c 'exec /xentest/run.sh >/dev/hvc0 2>&1 </dev/null'
StandardOutput=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/xen-test.service "$rootfs/etc/systemd/system/multi-user.target.wants/xen-test.service"
# Fewer units to start under TCG.
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer; do
	rm -f "$rootfs/etc/systemd/system/timers.target.wants/$u"
done

{
	echo "$key"
	echo "mirror $mirror"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start)) s"
	echo "kernel $kver"
	chroot "$rootfs" dpkg-query -W -f='${Package} ${Version}\n' xen-hypervisor-4.20-amd64 xen-utils-4.20 xen-system-amd64 qemu-system-xen linux-image-amd64 systemd pocl-opencl-icd
} >"$tmp/$stampname"

say "packing root.img"
size=$(du -sm "$rootfs" | cut -f1)
truncate -s "$((size + size / 2 + 512))M" "$tmp/root.img"
mkfs.ext4 -q -L xenroot -d "$rootfs" "$tmp/root.img" ||
	die "mkfs.ext4 -d failed"
rm -rf "$rootfs"
cp "$tmp/$stampname" "$tmp/$stampname.tmp" && mv "$tmp/$stampname.tmp" "$tmp/$stampname"

swap_in "$tmp" "$dir"
say "built $dir in $((SECONDS - start)) s"
