#!/usr/bin/env bash
# build-deb.sh OUTDIR: build the Debian packages vgpud and vgpud-guest
# (issue 33; docs/operating.md "Installing") with dpkg-deb, into OUTDIR:
#
#   vgpud_VERSION_amd64.deb        /usr/sbin/vgpud, /usr/bin/vgpuctl,
#                                  vgpud.service, /etc/vgpud/config.json
#   vgpud-guest_VERSION_amd64.deb  the OpenCL ICD under
#                                  /usr/lib/x86_64-linux-gnu/vgpud, its
#                                  /etc/OpenCL/vendors/vgpud.icd, vgpu-icdd
#                                  and vgpu-agent (systemd services), the
#                                  guest driver's programs
#
# The maintainer scripts, units and configuration are packaging/deb/*.
# VERSION is VGPUD_DEB_VERSION if set, else 0.1~gitDATE.REV from the HEAD
# commit (with +dirty for a work tree with changes). The ICD must be built
# (make icd: build/icd/libvgpud-icd.so). Needs go, gcc and dpkg-deb; no
# root (--root-owner-group). Each package is rebuilt from nothing; the
# .deb is written to a temporary name and renamed, so OUTDIR never holds a
# partial one.
set -euo pipefail

say() { echo "build-deb: $*" >&2; }
die() {
	echo "build-deb: $*" >&2
	exit 1
}

[[ $# -eq 1 ]] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
out=$(realpath -m "$1")
GO=${GO:-go}
icd=build/icd/libvgpud-icd.so
[[ -f $icd ]] || die "$icd missing: make icd"
command -v dpkg-deb >/dev/null || die "dpkg-deb missing (Debian: dpkg)"

version=${VGPUD_DEB_VERSION:-}
if [[ -z $version ]]; then
	when=$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S 2>/dev/null || date -u +%Y%m%d%H%M%S)
	rev=$(git rev-parse --short=10 HEAD 2>/dev/null || echo unknown)
	version="0.1~git$when.$rev"
	git diff --quiet HEAD 2>/dev/null || version+="+dirty"
fi

stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage" "$out"

# control PKG DIR: DEBIAN/ from packaging/deb/PKG, with the version and
# the installed size (KiB) filled in.
control() {
	local pkg=$1 root=$2 f size
	mkdir -p "$root/DEBIAN"
	for f in packaging/deb/$pkg/{postinst,prerm,postrm,conffiles}; do
		[[ -f $f ]] && install -m "$([[ $f == *conffiles ]] && echo 644 || echo 755)" "$f" "$root/DEBIAN/"
	done
	size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
	sed -e "s/@VERSION@/$version/" -e "s/@SIZE@/$size/" "packaging/deb/$pkg/control.in" >"$root/DEBIAN/control"
	find "$root" -type d -exec chmod 755 {} +
	local tmp=$out/.${pkg}_${version}_amd64.deb.tmp
	dpkg-deb --root-owner-group -Zxz --build "$root" "$tmp" >/dev/null
	# Older versions of this package are replaced.
	rm -f "$out/${pkg}"_*_amd64.deb
	mv "$tmp" "$out/${pkg}_${version}_amd64.deb"
	say "$out/${pkg}_${version}_amd64.deb"
}

gobuild() { # gobuild OUT PKG [env...]
	local o=$1 p=$2
	shift 2
	env "$@" "$GO" build -trimpath -ldflags=-s -o "$o" "$p"
}

# vgpud: the daemon links the OpenCL ICD loader (cgo); vgpuctl is pure Go.
r=$stage/vgpud
install -d "$r/usr/sbin" "$r/usr/bin" "$r/lib/systemd/system" "$r/etc/vgpud/instances.d" "$r/usr/share/doc/vgpud"
gobuild "$r/usr/sbin/vgpud" ./cmd/vgpud
gobuild "$r/usr/bin/vgpuctl" ./cmd/vgpuctl CGO_ENABLED=0
install -m 644 packaging/deb/vgpud/vgpud.service "$r/lib/systemd/system/"
install -m 644 packaging/deb/vgpud/config.json "$r/etc/vgpud/"
install -m 644 docs/operating.md docs/upgrade.md docs/design.md "$r/usr/share/doc/vgpud/"
control vgpud "$r"

# vgpud-guest: static Go programs (as in the test guest's initramfs), the
# ICD and the loader's file naming it by absolute path.
r=$stage/vgpud-guest
lib=/usr/lib/x86_64-linux-gnu/vgpud
install -d "$r/usr/sbin" "$r$lib" "$r/etc/OpenCL/vendors" "$r/lib/systemd/system" "$r/usr/share/doc/vgpud-guest"
for p in vgpu-agent vgpu-icdd vgpu-suite vgpu-bench vgpu-mmiobench; do
	gobuild "$r/usr/sbin/$p" "./guestagent/cmd/$p" CGO_ENABLED=0
done
install -m 644 "$icd" "$r$lib/libvgpud-icd.so"
echo "$lib/libvgpud-icd.so" >"$r/etc/OpenCL/vendors/vgpud.icd"
install -m 644 packaging/deb/vgpud-guest/vgpu-agent.service packaging/deb/vgpud-guest/vgpu-icdd.service "$r/lib/systemd/system/"
install -m 644 docs/icd.md docs/agent-channel.md docs/guest-image.md "$r/usr/share/doc/vgpud-guest/"
control vgpud-guest "$r"

rm -rf "$stage"
