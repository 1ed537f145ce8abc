#!/usr/bin/env bash
# vmm-root.sh DIR: build the modern VMM root (docs/vmm-root.md, issue 28):
# a Debian trixie root file system holding trixie-backports' QEMU 11.1
# (qemu-system-x86, with the vfio-user-pci device), trixie's libvirt
# (libvirt-daemon-system, libvirt-clients) and trixie's two OpenCL
# platforms for make test-platforms (docs/platforms.md): PoCL 6
# (pocl-opencl-icd) and Mesa's rusticl (mesa-opencl-icd, run on llvmpipe),
# with the ICD loader and clinfo, and gcc (worker/sandbox's tests build a
# fake vendor's libraries with cc), from the same Debian registry the
# host's apt uses. scripts/vmm-run.sh runs programs from it.
#
# Steps: install debootstrap on the host if missing; read the Debian mirror
# from the host's apt sources (VMM_ROOT_MIRROR overrides it); debootstrap
# --variant=minbase trixie into DIR.tmp; add trixie-updates,
# trixie-backports (and trixie-security when the host lists a -security
# archive) to the root's sources; apt-get install inside the root by
# chroot, with /proc, /dev and /sys bound only for that, in a private mount
# namespace (nothing reaches the host's mount table, even if this script is
# killed); write DIR.tmp/.vmm-root-stamp; rename DIR.tmp to DIR.
#
# Cached: the stamp's first line is a hash of this script, so a second run
# with the same script does nothing, and a changed script rebuilds. DIR
# exists only once it is complete (DIR.tmp is renamed last), so a failed or
# killed build is never taken for a finished one; the next run starts
# DIR.tmp afresh. Concurrent runs for one DIR are serialised by a lock file.
#
# Needs root (debootstrap, chroot, mount) and the network (the registry).
set -euo pipefail

say() { echo "vmm-root: $*" >&2; }
die() {
	echo "vmm-root: $*" >&2
	exit 1
}

if [[ $# -ne 1 ]]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi
dir=$(realpath -m "$1")
[[ $(id -u) -eq 0 ]] || die "needs root: debootstrap, chroot and mount"

stampname=.vmm-root-stamp
# shellcheck source=lib/apt-host.sh
. "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/lib/apt-host.sh"
# The cache key covers this script and the library it sources.
key=$(build_key "${BASH_SOURCE[0]}")

uptodate() { [[ -f $dir/$stampname ]] && [[ $(head -n1 "$dir/$stampname") == "$key" ]]; }

if uptodate; then
	say "$dir is up to date ($(sed -n 's/^qemu-system-x86 //p' "$dir/$stampname"))"
	exit 0
fi
lock_build "$dir"

export DEBIAN_FRONTEND=noninteractive
ensure_debootstrap


# The mirror is the URI that serves the host's own Debian release (its
# codename as a suite); the security archive is the URI serving
# CODENAME-security.
codename=$(host_codename)
mirror=${VMM_ROOT_MIRROR:-}
security=${VMM_ROOT_SECURITY_MIRROR:-}
if [[ -z $mirror && -n $codename ]]; then
	mirror=$(host_mirror "$codename")
fi
if [[ -z $security && -n $codename ]]; then
	security=$(host_mirror "$codename-security")
fi
[[ -n $mirror ]] || die "no Debian mirror found in the host's apt sources (host release: ${codename:-not Debian}); set VMM_ROOT_MIRROR to one"
mirror=${mirror%/}
security=${security%/}
say "mirror $mirror${security:+, security $security}"

tmp=$dir.tmp
fresh_dir "$tmp"

start=$SECONDS
say "debootstrap trixie into $tmp"
logged "$dir.debootstrap.log" debootstrap debootstrap --variant=minbase trixie "$tmp" "$mirror"

debian_sources "$tmp" "$mirror" "$security" "trixie trixie-updates trixie-backports"
no_services "$tmp"

# The installs run in a private mount namespace (root_apt).
say "installing qemu-system-x86 (trixie-backports), libvirt and OpenCL (trixie)"
logged "$dir.install.log" "installing into the root" root_apt "$tmp" '
	inroot "${apt[@]}" -t trixie-backports install qemu-system-x86
	inroot "${apt[@]}" install libvirt-daemon-system libvirt-clients
	inroot "${apt[@]}" install ocl-icd-libopencl1 pocl-opencl-icd mesa-opencl-icd clinfo gcc libc6-dev
'

{
	echo "$key"
	echo "mirror $mirror"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start)) s"
	chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' qemu-system-x86 qemu-system-common libvirt-daemon-system libvirt-clients libvirt-daemon libc6 \
		ocl-icd-libopencl1 pocl-opencl-icd mesa-opencl-icd clinfo
} >"$tmp/$stampname"
chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' >"$tmp/.vmm-root-packages"

# Swap the finished root in: DIR is either the old complete root or the
# new one, never a partial one.
swap_in "$tmp" "$dir"
say "built $dir in $((SECONDS - start)) s: $(sed -n 's/^qemu-system-x86 //p' "$dir/$stampname")"
