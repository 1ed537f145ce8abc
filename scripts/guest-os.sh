#!/usr/bin/env bash
# guest-os.sh DIR: build the ordinary Debian VM that make test-guest-deb
# boots to install the vgpud-guest package in (issue 33;
# docs/guest-image.md, "An ordinary Debian VM"). Unlike the test guest
# (vgpu-init in our initramfs) and the userland disk (unpacked with dpkg -x,
# run by our init), this is a Debian system as an operator's VM is one: the
# host's Debian release by debootstrap, Debian's kernel and Debian's own
# initramfs (initramfs-tools), systemd as init, and a user account.
#
# It holds what vgpud-guest, clinfo and python3-pyopencl depend on (Python,
# NumPy, the ICD loader), but not those three: the test installs them with
# apt inside the booted VM, offline, from DIR/debs (clinfo and
# python3-pyopencl, downloaded here) and build/deb (vgpud-guest). No other
# OpenCL platform is installed: vgpud-guest provides opencl-icd, which is
# what python3-pyopencl asks for.
#
# Writes:
#   DIR/root.ext4     the root file system (QEMU attaches it with
#                     snapshot=on: writes go to a temporary file)
#   DIR/vmlinuz       the kernel of linux-image-amd64 in the root
#   DIR/initrd.img    its initramfs, made by update-initramfs in the root
#   DIR/debs/*.deb    clinfo and python3-pyopencl
#   DIR/.guest-os-stamp  the cache key, then what was built
#
# The test's own piece is one systemd unit, vgpud-check.service: after
# multi-user.target it mounts the 9p share "vgpudtest" (the test's files),
# runs its check.sh with the output on the serial console, and powers the
# VM off. Nothing of vgpud is in the image.
#
# Cached: the stamp's first line is a hash of this script and the library
# it sources; DIR exists only once complete (DIR.tmp is renamed last);
# concurrent runs are serialised by a lock file. The mirror is the host's
# (apt sources; GUEST_OS_MIRROR overrides it): no registry host name is
# written here. Needs root (debootstrap, chroot) and the registry.
set -euo pipefail

say() { echo "guest-os: $*" >&2; }
die() {
	echo "guest-os: $*" >&2
	exit 1
}

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$(realpath -m "$1")
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap and chroot"

stampname=.guest-os-stamp
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=lib/apt-host.sh
. "$here/lib/apt-host.sh"
key=$(build_key "${BASH_SOURCE[0]}")
uptodate() { [[ -f $dir/$stampname ]] && [[ $(head -n1 "$dir/$stampname") == "$key" ]]; }
lock_build "$dir"

export DEBIAN_FRONTEND=noninteractive
ensure_debootstrap
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 missing (Debian: e2fsprogs)"

codename=$(host_codename)
[[ -n $codename ]] || die "the host is not Debian: its release names the VM's"
mirror=${GUEST_OS_MIRROR:-$(host_mirror "$codename")}
[[ -n $mirror ]] || die "no Debian mirror for $codename in the host's apt sources; set GUEST_OS_MIRROR"
mirror=${mirror%/}

out=$dir.tmp
root=$out/root
fresh_dir "$out"
mkdir -p "$out/debs"
start=$SECONDS

# What an operator's minimal VM has (systemd, udev, Debian's kernel and
# initramfs-tools), plus the dependencies of the three packages the test
# installs, so that apt needs nothing from the network in the VM.
pkgs=systemd-sysv,udev,kmod,dbus,procps,initramfs-tools,linux-image-amd64
pkgs+=,ocl-icd-libopencl1,python3,python3-numpy,python3-mako,python3-appdirs
pkgs+=,python3-platformdirs,python3-pytools,python3-six,python3-pkg-resources
say "debootstrap $codename into $root from $mirror"
logged "$dir.debootstrap.log" debootstrap debootstrap --variant=minbase --include="$pkgs" "$codename" "$root" "$mirror"

# The packages the test installs in the VM, from the same archive, with
# the root's own apt (its sources name the mirror debootstrap used).
chroot "$root" apt-get -qq update >/dev/null
(cd "$out/debs" && chroot "$root" sh -c 'cd /tmp && apt-get -qq download clinfo python3-pyopencl' && mv "$root"/tmp/*.deb .) ||
	die "cannot download clinfo and python3-pyopencl"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/*

# Debian's initramfs with the drivers of this VM's root disk only (the
# build cannot detect the VM's hardware; MODULES=list is how an operator
# names it).
printf 'MODULES=list\n' >"$root/etc/initramfs-tools/conf.d/vgpud-guest-os"
printf 'virtio_pci\nvirtio_blk\next4\n' >>"$root/etc/initramfs-tools/modules"
chroot "$root" update-initramfs -u -k all >>"$dir.debootstrap.log" 2>&1 || die "update-initramfs failed (log: $dir.debootstrap.log)"

# The system's configuration: root on the virtio disk, a host name, a
# user, no login prompts on the console (the check's output goes there).
echo '/dev/vda / ext4 errors=remount-ro 0 1' >"$root/etc/fstab"
echo vgpud-guest >"$root/etc/hostname"
chroot "$root" useradd -m -u 1000 -s /bin/bash tester
: >"$root/etc/machine-id"
chroot "$root" systemctl mask serial-getty@.service getty@.service >/dev/null 2>&1

# The test's unit.
cat >"$root/usr/local/sbin/vgpud-check" <<'EOF'
#!/bin/sh
# Mount the test's 9p share and run its check.sh (vgpud-check.service).
mkdir -p /mnt/vgpudtest
mount -t 9p -o trans=virtio,version=9p2000.L,ro vgpudtest /mnt/vgpudtest || { echo "VGPUD-CHECK no 9p share vgpudtest"; exit 1; }
exec /bin/sh /mnt/vgpudtest/check.sh
EOF
chmod 755 "$root/usr/local/sbin/vgpud-check"
cat >"$root/etc/systemd/system/vgpud-check.service" <<'EOF'
[Unit]
Description=vgpud test: run the check the host shares over 9p, then power off
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/vgpud-check
ExecStopPost=/bin/systemctl poweroff --no-block
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0

[Install]
WantedBy=multi-user.target
EOF
chroot "$root" systemctl enable vgpud-check.service >/dev/null 2>&1

# The kernel and initramfs, for QEMU's -kernel and -initrd.
kernel=$(cd "$root/boot" && ls vmlinuz-* | sort -V | tail -n1)
release=${kernel#vmlinuz-}
cp "$root/boot/$kernel" "$out/vmlinuz"
cp "$root/boot/initrd.img-$release" "$out/initrd.img"

# The disk: the root's size and a quarter more for what apt installs.
mib=$(($(du -sm "$root" | cut -f1) * 5 / 4 + 256))
mkfs.ext4 -q -L vgpud-guest -d "$root" "$out/root.ext4" "${mib}M" || die "mkfs.ext4 failed"
{
	echo "$key"
	echo "mirror $mirror"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start)) s"
	echo "kernel $release"
	echo "disk ${mib} MiB"
	chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' systemd linux-image-amd64 python3-numpy ocl-icd-libopencl1
	(cd "$out/debs" && ls)
} >"$out/$stampname"
rm -rf "$root"
rm -rf "$dir"
mv -T "$out" "$dir"
say "built $dir in $((SECONDS - start)) s"
