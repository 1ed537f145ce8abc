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
key="script $(cat "$(realpath "${BASH_SOURCE[0]}")" "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/lib/apt-host.sh" | sha256sum | cut -d' ' -f1)"

uptodate() { [[ -f $dir/$stampname ]] && [[ $(head -n1 "$dir/$stampname") == "$key" ]]; }

if uptodate; then
	say "$dir is up to date ($(sed -n 's/^qemu-system-x86 //p' "$dir/$stampname"))"
	exit 0
fi

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if uptodate; then # another run finished it while this one waited
	exit 0
fi

export DEBIAN_FRONTEND=noninteractive
ensure_debootstrap


# The mirror is the URI that serves the host's own Debian release (its
# codename as a suite); the security archive is the URI serving
# CODENAME-security.
codename=$(host_codename)
mirror=${VMM_ROOT_MIRROR:-}
security=${VMM_ROOT_SECURITY_MIRROR:-}
if [[ -z $mirror && -n $codename ]]; then
	mirror=$(apt_entries | awk -v c="$codename" '$2 == c { print $1; exit }')
fi
if [[ -z $security && -n $codename ]]; then
	security=$(apt_entries | awk -v c="$codename-security" '$2 == c { print $1; exit }')
fi
[[ -n $mirror ]] || die "no Debian mirror found in the host's apt sources (host release: ${codename:-not Debian}); set VMM_ROOT_MIRROR to one"
mirror=${mirror%/}
security=${security%/}
say "mirror $mirror${security:+, security $security}"

tmp=$dir.tmp
# A previous run's half-built root. Its mounts lived in a private mount
# namespace and died with it; refuse to delete through a mount anyway.
if [[ -e $tmp ]]; then
	if findmnt -rn -o TARGET | grep -qF "$tmp/"; then
		die "$tmp has mounts under it; unmount them first"
	fi
	rm -rf "$tmp"
fi

start=$SECONDS
say "debootstrap trixie into $tmp"
debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$dir.debootstrap.log" 2>&1 ||
	{ tail -n 20 "$dir.debootstrap.log" >&2; die "debootstrap failed (log: $dir.debootstrap.log)"; }

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
{
	printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-updates trixie-backports\nComponents: main\nSigned-By: %s\n' "$mirror" "$keyring"
	if [[ -n $security ]]; then
		printf '\nTypes: deb\nURIs: %s\nSuites: trixie-security\nComponents: main\nSigned-By: %s\n' "$security" "$keyring"
	fi
} >"$tmp/etc/apt/sources.list.d/debian.sources"
rm -f "$tmp/etc/apt/sources.list"
# No init runs in this root: package scripts must not start services.
printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
chmod 755 "$tmp/usr/sbin/policy-rc.d"

# The installs run in a private mount namespace with /proc, /dev and /sys
# bound into the root; the trap unmounts them, and the namespace's end
# drops them regardless.
say "installing qemu-system-x86 (trixie-backports), libvirt and OpenCL (trixie)"
unshare -m --propagation private bash -euo pipefail -c '
	root=$1
	cleanup() { umount -R "$root/sys" "$root/dev" "$root/proc" 2>/dev/null || true; }
	trap cleanup EXIT
	mount --bind /proc "$root/proc"
	mount --rbind /dev "$root/dev"
	mount --rbind /sys "$root/sys"
	inroot() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
	apt=(apt-get -y -q -o Dpkg::Use-Pty=0 --no-install-recommends)
	inroot apt-get -q update
	inroot "${apt[@]}" -t trixie-backports install qemu-system-x86
	inroot "${apt[@]}" install libvirt-daemon-system libvirt-clients
	inroot "${apt[@]}" install ocl-icd-libopencl1 pocl-opencl-icd mesa-opencl-icd clinfo gcc libc6-dev
	inroot apt-get clean
' vmm-root "$tmp" >"$dir.install.log" 2>&1 ||
	{ tail -n 20 "$dir.install.log" >&2; die "installing into the root failed (log: $dir.install.log)"; }

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
if [[ -e $dir ]]; then
	rm -rf "$dir.old"
	mv -T "$dir" "$dir.old"
fi
mv -T "$tmp" "$dir"
rm -rf "$dir.old"
say "built $dir in $((SECONDS - start)) s: $(sed -n 's/^qemu-system-x86 //p' "$dir/$stampname")"
