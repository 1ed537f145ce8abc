#!/usr/bin/env bash
# vmm-run.sh ROOT [--] CMD [ARGS...]: run CMD from the VMM root that
# scripts/vmm-root.sh built in ROOT (docs/vmm-root.md), e.g.
#
#   scripts/vmm-run.sh build/vmm-root -- qemu-system-x86_64 --version
#
# CMD runs with ROOT as its root, with PATH the root's, in a private mount
# namespace (unshare -m) where these are bound into the root at their own
# paths, so file names mean the same inside and out:
#   /proc, /dev (with /dev/kvm, /dev/shm, /dev/pts), /sys, /tmp
#   the repository's build/ (guest kernel, initramfs, images, binaries)
#   $VMM_RUN_DIR, if set (created if missing): a run directory, e.g.
#                 vgpud's, holding the sockets QEMU connects to
#   each path in $VMM_RUN_BINDS (colon-separated), if set
# The working directory is kept when it exists inside the root, else /.
#
# Nothing is mounted in the host's mount table: the mounts live in the
# namespace and go away with its last process, however it ends, and
# concurrent runs each have their own. A daemon CMD starts (qemu
# -daemonize, libvirtd -d) keeps them for as long as it runs. The script
# execs CMD (unshare and the shell in the namespace exec too): its pid,
# signals, stdin and exit status are CMD's.
#
# ROOT becomes the namespace's root by pivot_root, and the host's root is
# detached, rather than by chroot: the kernel refuses a chroot'ed process
# a new user namespace (EPERM), which vgpud's worker sandbox starts each
# worker in (make test-platforms runs the sandbox's tests from the root).
#
# Needs root (unshare -m, mount, pivot_root).
set -euo pipefail

die() {
	echo "vmm-run: $*" >&2
	exit 1
}

usage() {
	echo "usage: $0 ROOT [--] CMD [ARGS...]" >&2
	exit 2
}

self=$(realpath "${BASH_SOURCE[0]}")

if [[ ${1:-} != --in-namespace ]]; then
	[[ $# -ge 2 ]] || usage
	[[ $(id -u) -eq 0 ]] || die "needs root: unshare -m, mount and pivot_root"
	root=$(realpath -e "$1" 2>/dev/null) || die "$1: no such root; build it with make vmm-root"
	[[ -f $root/.vmm-root-stamp ]] || die "$root is not a finished VMM root (no .vmm-root-stamp); build it with make vmm-root"
	shift
	[[ ${1:-} == -- ]] && shift
	[[ $# -ge 1 ]] || usage
	exec unshare -m --propagation private -- "$BASH" "$self" --in-namespace "$root" "$@"
fi

# In the private mount namespace.
shift
root=$1
shift
# ROOT must be a mount point for pivot_root: bound onto itself before the
# binds below land on it.
mount --bind "$root" "$root"

# bind SRC: bind SRC at the same path inside the root.
bind() {
	local src dst
	src=$(realpath -e "$1") || die "$1: no such path to bind"
	dst=$root$src
	if [[ -d $src ]]; then
		mkdir -p "$dst"
	else
		mkdir -p "$(dirname "$dst")"
		[[ -e $dst ]] || : >"$dst"
	fi
	mount --rbind "$src" "$dst"
}

bind /proc
bind /dev
bind /sys
bind /tmp
build=$(dirname "$(dirname "$self")")/build
[[ -d $build ]] && bind "$build"
if [[ -n ${VMM_RUN_DIR:-} ]]; then
	mkdir -p "$VMM_RUN_DIR"
	bind "$VMM_RUN_DIR"
fi
if [[ -n ${VMM_RUN_BINDS:-} ]]; then
	IFS=: read -r -a extra <<<"$VMM_RUN_BINDS"
	for p in "${extra[@]}"; do
		[[ -n $p ]] && bind "$p"
	done
fi

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cwd=$PWD
# pivot_root(".", "."): the host's root is stacked on ROOT, and the
# lazy unmount of "." takes it away (pivot_root(2)).
cd "$root"
pivot_root . .
umount -l .
# shellcheck disable=SC2016 # $1 and $@ are the inner shell's
exec /bin/sh -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' vmm-run "$cwd" "$@"
