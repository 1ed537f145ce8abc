#!/usr/bin/env bash
# deb-root.sh DIR: build the Debian root that make test-deb boots with
# systemd-nspawn -b to install the packages in (scripts/test-deb.sh): the
# host's Debian release, minbase, with systemd, procps, the OpenCL ICD
# loader, PoCL as the OpenCL platform, clinfo and QEMU (the VM that
# computes through the upgrades), from the Debian mirror the host's apt
# uses (read from its sources, one-line and deb822 alike; DEB_ROOT_MIRROR
# overrides it). No registry host name is written here.
#
# Cached: the stamp's first line is a hash of this script, so a second run
# with the same script does nothing and a changed script rebuilds. DIR
# exists only once complete (DIR.tmp is renamed last); concurrent runs are
# serialised by a lock file. The test never writes into DIR: it boots it
# with a tmpfs overlay (--volatile=overlay).
#
# Needs root (debootstrap, chroot) and the network (the registry).
set -euo pipefail

say() { echo "deb-root: $*" >&2; }
die() {
	echo "deb-root: $*" >&2
	exit 1
}

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$(realpath -m "$1")
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap and chroot"

stampname=.deb-root-stamp
# shellcheck source=lib/apt-host.sh
. "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/lib/apt-host.sh"
# The cache key covers this script and the library it sources.
key=$(build_key "${BASH_SOURCE[0]}")
uptodate() { [[ -f $dir/$stampname ]] && [[ $(head -n1 "$dir/$stampname") == "$key" ]]; }
lock_build "$dir"

export DEBIAN_FRONTEND=noninteractive
ensure_debootstrap


codename=$(host_codename)
[[ -n $codename ]] || die "the host is not Debian: its release names the root's"
mirror=${DEB_ROOT_MIRROR:-$(host_mirror "$codename")}
[[ -n $mirror ]] || die "no Debian mirror for $codename in the host's apt sources; set DEB_ROOT_MIRROR"
mirror=${mirror%/}

tmp=$dir.tmp
fresh_dir "$tmp"
start=$SECONDS
pkgs=systemd,dbus,procps,ocl-icd-libopencl1,pocl-opencl-icd,clinfo,qemu-system-x86
say "debootstrap $codename ($pkgs) into $tmp from $mirror"
logged "$dir.debootstrap.log" debootstrap debootstrap --variant=minbase --include="$pkgs" "$codename" "$tmp" "$mirror"
chroot "$tmp" apt-get clean
# A machine ID is made at the first boot (nspawn gives one), and nothing
# asks for a login on the console.
rm -f "$tmp/etc/machine-id"
chroot "$tmp" systemctl mask console-getty.service getty@.service >/dev/null 2>&1 || true
{
	echo "$key"
	echo "mirror $mirror"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start)) s"
	chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' systemd pocl-opencl-icd ocl-icd-libopencl1 clinfo qemu-system-x86
} >"$tmp/$stampname"
rm -rf "$dir"
mv -T "$tmp" "$dir"
say "built $dir in $((SECONDS - start)) s"
