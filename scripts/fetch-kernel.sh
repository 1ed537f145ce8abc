#!/usr/bin/env bash
# fetch-kernel.sh OUTDIR: fetch Debian's generic amd64 kernel for the vgpud
# test guest (docs/guest-image.md).
#
# Resolves the exact kernel package through the linux-image-amd64
# metapackage, downloads it with apt-get download, unpacks it with dpkg -x and
# writes:
#   OUTDIR/vmlinuz          the kernel image
#   OUTDIR/modules/*.ko     the modules the guest loads (uncompressed in Debian 12)
#   OUTDIR/kernel-version   the kernel release (uname -r of the guest)
#   OUTDIR/kernel-package   "<package> <version>", used to skip a second fetch
#
# Idempotent: does nothing when OUTDIR already holds the resolved version.
# Needs apt (Debian); runs apt-get update only if the package lookup fails.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
outdir=$1

modules=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_console uio uio_pci_generic)

# resolve prints "<package> <version>" of the kernel image the metapackage
# depends on, or fails.
resolve() {
	local pkg ver
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
	[[ -n $pkg ]] || return 1
	ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null |
		awk '$1 == "Version:" { print $2; exit }')
	[[ -n $ver ]] || return 1
	echo "$pkg $ver"
}

if ! want=$(resolve); then
	echo "fetch-kernel: linux-image-amd64 not resolvable, running apt-get update" >&2
	apt-get update -qq
	want=$(resolve) || { echo "fetch-kernel: cannot resolve linux-image-amd64's kernel package" >&2; exit 1; }
fi
read -r pkg ver <<<"$want"

if [[ -f $outdir/vmlinuz && -f $outdir/kernel-package && $(cat "$outdir/kernel-package") == "$want" ]]; then
	echo "fetch-kernel: $outdir already holds $pkg $ver"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download drops privileges to _apt unless told otherwise; the dir
chmod 0755 "$tmp" # must be readable either way.
(cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" >/dev/null)
deb=$(ls "$tmp"/*.deb)
dpkg -x "$deb" "$tmp/root"

shopt -s nullglob
vmlinuz=("$tmp"/root/boot/vmlinuz-*)
if [[ ${#vmlinuz[@]} -ne 1 ]]; then
	echo "fetch-kernel: expected one boot/vmlinuz-* in $pkg, found ${#vmlinuz[@]}" >&2
	exit 1
fi
release=${vmlinuz[0]##*/vmlinuz-}
moddir=("$tmp"/root/lib/modules/*/kernel)
if [[ ${#moddir[@]} -ne 1 ]]; then
	echo "fetch-kernel: expected one lib/modules/*/kernel in $pkg, found ${#moddir[@]}" >&2
	exit 1
fi

mkdir -p "$outdir"
rm -rf "$outdir/modules"
mkdir -p "$outdir/modules"
for m in "${modules[@]}"; do
	ko=$(find "${moddir[0]}" -name "$m.ko" -print -quit)
	if [[ -z $ko ]]; then
		echo "fetch-kernel: module $m.ko not found in $pkg (built in or compressed?)" >&2
		exit 1
	fi
	cp "$ko" "$outdir/modules/$m.ko"
done
# vmlinuz and kernel-package last, so an interrupted run is redone.
cp "${vmlinuz[0]}" "$outdir/vmlinuz.tmp"
mv "$outdir/vmlinuz.tmp" "$outdir/vmlinuz"
echo "$release" >"$outdir/kernel-version"
echo "$want" >"$outdir/kernel-package"
echo "fetch-kernel: $pkg $ver ($release) -> $outdir"
