#!/usr/bin/env bash
# fetch-userland.sh OUTDIR [GUESTDIR]: build the vgpud test guest's Debian
# userland disk (docs/guest-image.md, "The userland image"), for issue 11:
# unmodified Debian OpenCL applications inside the guest.
#
# GUESTDIR (default: OUTDIR's parent) must hold the kernel that
# scripts/fetch-kernel.sh fetched; the disk's kernel modules are taken from
# the same kernel package.
#
# Resolves the packages below and their dependencies (Depends and
# Pre-Depends, no Recommends) with apt's own resolver against an empty
# private dpkg status, downloads them into OUTDIR/debs (kept: a later run
# downloads only what changed), unpacks each with dpkg -x into a root
# directory, does what the packages' maintainer scripts would have done and
# matters here (update-alternatives links, the ld.so cache, users), and
# writes:
#   OUTDIR/rootfs.ext4         the root file system, made with mkfs.ext4 -d
#                              (attached read-only as /dev/vda)
#   OUTDIR/initrd/             what the initramfs adds to vgpu-init's:
#                              bin/busybox, bin/vgpu-apps (mounts the disk,
#                              runs a program in it), lib/modules/disk/*.ko
#                              and their load order (virtio_blk, ext4, ...)
#   OUTDIR/initrd.cpio         the same tree as a newc archive, to append to
#                              an initramfs made by vgpu-mkinitramfs
#   OUTDIR/packages            "<package> <version>" of everything installed
#   OUTDIR/kernel-package      the kernel package the modules come from
#   OUTDIR/stamp               what the image was made from; a second run
#                              with the same inputs does nothing
#
# The OpenCL ICD role (opencl-icd, which hashcat and pyopencl depend on) is
# declared present in the private status, so apt does not pull in PoCL and
# its compiler: the guest's ICD will be vgpud's (issue 11), none exists yet.
#
# Needs root (dpkg -x keeps the packages' owners in the image, ldconfig -r
# chroots), apt, dpkg-deb and mkfs.ext4 (e2fsprogs). No network in the guest.
set -euo pipefail

# The applications issue 11 runs in the guest, ffmpeg for its OpenCL
# filters (issue 45), and a shell.
packages=(
	ocl-icd-libopencl1
	clinfo
	clpeak
	python3-pyopencl
	python-pyopencl-doc
	python3-pytest
	hashcat
	hashcat-data
	clblast-utils
	ffmpeg
	busybox-static
)

# Kernel modules the initramfs loads to mount the disk, in dependency order
# (the kernel package has no modules.dep: depmod runs at install).
disk_modules=(
	drivers/block/virtio_blk
	lib/crc16
	crypto/crc32c_generic
	fs/mbcache
	fs/jbd2/jbd2
	fs/ext4/ext4
)

say() { echo "fetch-userland: $*"; }
die() {
	echo "fetch-userland: $*" >&2
	exit 1
}

if [[ $# -lt 1 || $# -gt 2 ]]; then
	echo "usage: $0 OUTDIR [GUESTDIR]" >&2
	exit 2
fi
outdir=$(realpath -m "$1")
guestdir=$(realpath -m "${2:-$outdir/..}")

[[ $(id -u) -eq 0 ]] || die "needs root: the image keeps the packages' file owners (dpkg -x) and ldconfig -r chroots"
if ! command -v mkfs.ext4 >/dev/null; then
	say "mkfs.ext4 missing: installing e2fsprogs"
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get install -y -qq e2fsprogs >/dev/null || { apt-get update -qq && apt-get install -y -qq e2fsprogs >/dev/null; }; } ||
		die "cannot install e2fsprogs (mkfs.ext4)"
fi
for tool in apt-get dpkg-deb mkfs.ext4 ldconfig chroot sha256sum; do
	command -v "$tool" >/dev/null || die "$tool not found (apt, dpkg, e2fsprogs, libc-bin, coreutils)"
done
[[ -f $guestdir/kernel-package && -f $guestdir/kernel-version ]] ||
	die "no kernel in $guestdir: run \`make kernel\` or \`scripts/fetch-kernel.sh $guestdir\` first"
kernel_package=$(cat "$guestdir/kernel-package")
kernel_release=$(cat "$guestdir/kernel-version")

# A private apt state: an empty dpkg status except for the ICD placeholder,
# its own package cache, and the downloads in OUTDIR/debs.
apt_dir=$outdir/apt
debs=$outdir/debs
mkdir -p "$apt_dir/cache" "$debs/partial"
chmod 0755 "$outdir" "$debs" # apt may drop privileges to _apt to download
cat >"$apt_dir/status" <<'EOF'
Package: vgpud-opencl-icd
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 0
Maintainer: vgpud
Architecture: amd64
Version: 0
Provides: opencl-icd
Description: placeholder for the vgpud guest OpenCL ICD (issue 11)

EOF
apt_opts=(
	-o "Dir::State::status=$apt_dir/status"
	-o "Dir::Cache=$apt_dir/cache"
	-o "Dir::Cache::archives=$debs"
	-o APT::Install-Recommends=false
	-o APT::Install-Suggests=false
	-o APT::Sandbox::User=root
)

# resolve prints "<package> <version> <arch>" for every package apt would
# install, or fails with apt's message on stderr.
resolve() {
	local out
	out=$(apt-get install -s -q "${apt_opts[@]}" "${packages[@]}" 2>&1) || {
		echo "$out" >&2
		return 1
	}
	# Inst libc6 (2.36-9+deb12u13 Debian:12.15/oldstable [amd64])
	# (an unrelated "[]" may follow)
	awk '$1 == "Inst" {
		v = $3; sub(/^\(/, "", v)
		rest = substr($0, index($0, "("))
		if (!match(rest, /\[[a-z0-9]+\]/)) { print "cannot parse: " $0 > "/dev/stderr"; exit 1 }
		print $2, v, substr(rest, RSTART + 1, RLENGTH - 2) }' <<<"$out" | sort
}

if ! resolved=$(resolve 2>"$apt_dir/resolve.err"); then
	say "cannot resolve the packages; running apt-get update"
	apt-get update -qq || true
	resolved=$(resolve 2>"$apt_dir/resolve.err") ||
		die "cannot resolve ${packages[*]} with apt:
$(cat "$apt_dir/resolve.err")"
fi
[[ -n $resolved ]] || die "apt resolved nothing for ${packages[*]}"
npkgs=$(wc -l <<<"$resolved")

# inputs_hash: what the image is made from: the package set, the kernel,
# this script.
inputs_hash() {
	{
		echo "$resolved"
		echo "$kernel_package"
		sha256sum <"${BASH_SOURCE[0]}"
	} | sha256sum | cut -d' ' -f1
}
stamp=$(inputs_hash)
if [[ -f $outdir/rootfs.ext4 && -f $outdir/initrd.cpio && -f $outdir/stamp && $(cat "$outdir/stamp") == "$stamp" ]]; then
	say "$outdir already holds the image of $npkgs packages"
	exit 0
fi
rm -f "$outdir/stamp"

# Download: apt keeps what is already in OUTDIR/debs and checks its hash.
# Stale package lists (a superseded security update) fail here: update
# them once and resolve again.
download() {
	apt-get install -y -q --download-only "${apt_opts[@]}" "${packages[@]}" >"$apt_dir/download.log" 2>&1
}
say "resolved $npkgs packages; downloading what $debs lacks"
if ! download; then
	say "download failed; running apt-get update and resolving again"
	apt-get update -qq || true
	resolved=$(resolve 2>"$apt_dir/resolve.err") ||
		die "cannot resolve ${packages[*]} with apt:
$(cat "$apt_dir/resolve.err")"
	npkgs=$(wc -l <<<"$resolved")
	stamp=$(inputs_hash)
	if ! download; then
		cat "$apt_dir/download.log" >&2
		die "cannot download the packages (apt's messages above)"
	fi
fi
grep -E '^(Get:|Fetched)' "$apt_dir/download.log" | tail -1 | sed 's/^/fetch-userland: apt: /' || true

# The deb of each resolved package, as apt names it (an epoch's ':' is
# written %3a).
declare -a deb_files=()
while read -r pkg ver arch; do
	f=$debs/${pkg}_${ver//:/%3a}_${arch}.deb
	[[ -f $f ]] || die "$pkg $ver: $f not downloaded"
	deb_files+=("$f")
done <<<"$resolved"
# Forget superseded versions, so the cache does not grow forever.
for f in "$debs"/*.deb; do
	[[ " ${deb_files[*]} " == *" $f "* ]] || rm -f "$f"
done

work=$outdir/work
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"

say "unpacking $npkgs packages"
for f in "${deb_files[@]}"; do
	dpkg -x "$f" "$root"
	name=$(basename "$f" .deb)
	mkdir -p "$work/control/$name"
	dpkg-deb -e "$f" "$work/control/$name"
done

# update-alternatives --install LINK NAME PATH PRIORITY from the
# maintainer scripts (libblas.so.3 and liblapack.so.3, which numpy needs,
# exist only as such links): the highest priority wins, as in auto mode.
declare -A alt_link=() alt_path=() alt_prio=()
while read -r link name path prio; do
	if [[ -z ${alt_prio[$name]:-} || $prio -gt ${alt_prio[$name]} ]]; then
		alt_link[$name]=$link alt_path[$name]=$path alt_prio[$name]=$prio
	fi
done < <(cat "$work"/control/*/postinst 2>/dev/null |
	sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' |
	awk '{ for (i = 1; i <= NF; i++) if ($i == "update-alternatives" && $(i+1) == "--install") {
		if ($(i+2) ~ /\$/ || $(i+3) ~ /\$/ || $(i+4) ~ /\$/ || $(i+5) !~ /^[0-9]+$/) next
		print $(i+2), $(i+3), $(i+4), $(i+5) } }')
mkdir -p "$root/etc/alternatives"
for name in "${!alt_link[@]}"; do
	[[ -e $root${alt_path[$name]} ]] || die "alternative $name: ${alt_path[$name]} not in the image"
	ln -sfn "${alt_path[$name]}" "$root/etc/alternatives/$name"
	ln -sfn "/etc/alternatives/$name" "$root${alt_link[$name]}"
	say "alternative ${alt_link[$name]} -> ${alt_path[$name]}"
done

# busybox's applets where Debian has no program of that name: a shell
# (/bin/sh) and the usual tools.
applets=0
while read -r rel; do
	base=${rel##*/}
	exists=false
	for d in bin sbin usr/bin usr/sbin; do
		if [[ -e $root/$d/$base || -L $root/$d/$base ]]; then
			exists=true
			break
		fi
	done
	if ! $exists; then
		mkdir -p "$root/$(dirname "$rel")"
		[[ $rel == */* ]] || continue # /linuxrc
		ln -s /bin/busybox "$root/$rel"
		applets=$((applets + 1))
	fi
done < <("$root/bin/busybox" --list-full)
say "linked $applets busybox applets (sh among them)"

# What base-files, base-passwd and the init system would provide.
for d in proc sys dev tmp run root var/tmp mnt etc/OpenCL/vendors vgpu/bin vgpu/lib; do
	mkdir -p "$root/$d"
done
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"
[[ -e $root/etc/passwd ]] || printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$root/etc/passwd"
[[ -e $root/etc/group ]] || printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$root/etc/group"
[[ -e $root/etc/hostname ]] || echo vgpu-guest >"$root/etc/hostname"
[[ -e $root/etc/hosts ]] || echo '127.0.0.1 localhost vgpu-guest' >"$root/etc/hosts"
# Python bytecode, as the packages' py3compile would have made it: without
# it every guest Python run compiles what it imports (numpy, pyopencl,
# pytest: about 10 s under TCG). The guest's own python3, chrooted; no
# SOURCE_DATE_EPOCH, so the .pyc files are checked by timestamp, which
# mkfs.ext4 -d keeps.
say "compiling Python bytecode"
env -i PATH=/usr/bin:/bin "$(command -v chroot)" "$root" /usr/bin/python3 -m compileall -q \
	-x '/(lib2to3/tests|test)/' /usr/lib/python3.11 /usr/lib/python3/dist-packages >"$work/compileall.log" 2>&1 ||
	die "python3 -m compileall failed in the image:
$(tail -20 "$work/compileall.log")"

# The ld.so cache (libc-bin's ldconfig trigger), from the image's own
# /etc/ld.so.conf.d.
ldconfig -r "$root"
printf '%s\n' "$resolved" | awk '{ print $1, $2 }' >"$root/etc/vgpud-packages"

# The disk's kernel modules, from the guest kernel's package.
initrd=$work/initrd
mkdir -p "$initrd/bin" "$initrd/lib/modules/disk"
read -r kpkg kver <<<"$kernel_package"
kdir=$work/kernel
mkdir -p "$kdir"
chmod 0755 "$kdir"
say "taking ${#disk_modules[@]} disk modules from $kpkg $kver"
(cd "$kdir" && apt-get download -q -o APT::Sandbox::User=root "$kpkg=$kver" >/dev/null 2>"$kdir/err") ||
	die "cannot download $kpkg $kver: $(cat "$kdir/err")"
dpkg -x "$kdir"/*.deb "$kdir/root"
: >"$initrd/lib/modules/disk/order"
for m in "${disk_modules[@]}"; do
	ko=$kdir/root/lib/modules/$kernel_release/kernel/$m.ko
	[[ -f $ko ]] || die "module $m.ko not in $kpkg (built in, compressed, or another release than $kernel_release?)"
	cp "$ko" "$initrd/lib/modules/disk/"
	basename "$m" >>"$initrd/lib/modules/disk/order"
done
rm -rf "$kdir"
cp "$root/bin/busybox" "$initrd/bin/busybox"

# vgpu-apps runs under vgpu-init (vgpu.run=vgpu-apps vgpu.args=PROG,ARGS):
# it mounts the disk read-only with tmpfs where programs write, makes the
# initramfs's /bin visible as /vgpu/bin, and runs PROG chrooted into the
# disk, in /root.
cat >"$initrd/bin/vgpu-apps" <<'EOF'
#!/bin/busybox sh
# vgpu-apps PROGRAM [ARG...]: run PROGRAM from the Debian userland disk
# (/dev/vda, read-only) chrooted into it (docs/guest-image.md). Made by
# scripts/fetch-userland.sh.
bb=/bin/busybox
fail() {
	echo "VGPU-APPS error: $*"
	exit 125
}
[ $# -ge 1 ] || fail "usage: vgpu-apps PROGRAM [ARG...]"
while read -r m; do
	$bb insmod "/lib/modules/disk/$m.ko" 2>/dev/null || [ -d "/sys/module/$m" ] || fail "insmod $m failed"
done </lib/modules/disk/order
i=0
until [ -b /dev/vda ]; do
	i=$((i + 1))
	[ $i -le 200 ] || fail "no /dev/vda after 10 s: is the userland disk attached (qemuvm.Config.Disk)?"
	$bb usleep 50000
done
r=/apps
$bb mkdir -p $r
$bb mount -t ext4 -o ro /dev/vda $r || fail "mount /dev/vda"
for d in proc sys dev; do
	$bb mount -o rbind /$d $r/$d || fail "bind /$d"
done
$bb mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $r/tmp &&
	$bb mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $r/var/tmp &&
	$bb mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs $r/run &&
	$bb mount -t tmpfs -o mode=0700 tmpfs $r/root || fail "mount tmpfs"
$bb mount -o bind,ro /bin $r/vgpu/bin || fail "bind /bin on /vgpu/bin"
# The vgpud OpenCL ICD, when the initramfs carries it (/lib/vgpud,
# docs/icd.md): it appears as /vgpu/lib in the userland and the loader
# finds it where it finds every ICD, through /etc/OpenCL/vendors. Its
# daemon, vgpu-icdd, owns the vGPUs and serves /run/vgpud/icd.sock to
# every user; it runs outside the chroot, as root.
if [ -f /lib/vgpud/libvgpud-icd.so ]; then
	$bb mount -o bind,ro /lib/vgpud $r/vgpu/lib || fail "bind /lib/vgpud on /vgpu/lib"
	$bb mount -t tmpfs -o mode=0755 tmpfs $r/etc/OpenCL/vendors || fail "mount tmpfs on /etc/OpenCL/vendors"
	echo /vgpu/lib/libvgpud-icd.so >$r/etc/OpenCL/vendors/vgpud.icd
fi
icdd=
if [ -x /bin/vgpu-icdd ]; then
	$bb mkdir -p $r/run/vgpud
	/bin/vgpu-icdd -socket $r/run/vgpud/icd.sock &
	icdd=$!
	i=0
	until [ -S $r/run/vgpud/icd.sock ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "vgpu-icdd did not listen within 30 s"
		$bb kill -0 $icdd 2>/dev/null || fail "vgpu-icdd exited"
		$bb usleep 50000
	done
fi
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/vgpu/bin
export HOME=/root TERM=dumb LANG=C.UTF-8
$bb chroot $r /bin/sh -c 'cd /root && exec "$@"' vgpu-apps "$@"
rc=$?
if [ -n "$icdd" ]; then
	$bb kill -TERM $icdd
	wait $icdd || echo "VGPU-APPS vgpu-icdd exit=$?"
fi
exit $rc
EOF
chmod 0755 "$initrd/bin/vgpu-apps" "$initrd/bin/busybox"

# The image: ext4 without a journal (it is mounted read-only), no reserved
# blocks, a quarter more room than the files need.
kib=$(du -sk "$root" | cut -f1)
inodes=$(find "$root" | wc -l)
size_mib=$((kib * 5 / 4 / 1024 + 64))
say "making a ${size_mib} MiB ext4 image of $((kib / 1024)) MiB in $inodes files"
rm -f "$work/rootfs.ext4"
mkfs.ext4 -q -F -L vgpud-apps -O ^has_journal -m 0 -N $((inodes + inodes / 4 + 1024)) \
	-E root_owner=0:0 -d "$root" "$work/rootfs.ext4" "${size_mib}M" >/dev/null ||
	die "mkfs.ext4 -d failed"

# The initramfs part as a newc archive (busybox's cpio; owners root).
(cd "$initrd" && find . -mindepth 1 | sort | "$root/bin/busybox" cpio -o -H newc -R 0:0 >"$work/initrd.cpio" 2>/dev/null) ||
	die "cpio of $initrd failed"

rm -rf "$outdir/initrd"
mv "$initrd" "$outdir/initrd"
mv "$work/initrd.cpio" "$outdir/initrd.cpio"
mv "$work/rootfs.ext4" "$outdir/rootfs.ext4"
printf '%s\n' "$resolved" | awk '{ print $1, $2 }' >"$outdir/packages"
echo "$kernel_package" >"$outdir/kernel-package"
echo "$stamp" >"$outdir/stamp"
say "$npkgs packages ($(du -sh --apparent-size "$outdir/rootfs.ext4" | cut -f1) image, $(du -sh "$outdir/rootfs.ext4" | cut -f1) used) -> $outdir"
