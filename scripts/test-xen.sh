#!/usr/bin/env bash
# test-xen.sh: make test-xen (docs/xen.md, "Under real Xen"; issue 30).
# Boots Xen 4.20 (Debian trixie's) in QEMU 11.1 from the VMM root under
# TCG, with AMD SVM and nested paging emulated (-cpu max), a Debian dom0
# from scripts/xen-root.sh, and in dom0: vgpud on PoCL, an HVM domU from
# tests/xen/domu.cfg (the project's test kernel and initramfs running
# vgpu-suite), the vGPU attached with vgpuctl attach -xen before the domU
# is unpaused. The dom0 side is tests/xen/run.sh on a second disk
# (label xentest) with vgpud, vgpuctl and the guest; the image's
# xen-test.service runs it.
#
# The console is also a socket, build/xen-test/console.sock, to type into
# while the VM runs (dom0 logs in as root without a password on hvc0;
# three ctrl-a switch to Xen's own console, 'h' for its keys).
#
# Everything goes to build/xen-test/: serial.log (Xen, dom0 and, copied by
# run.sh, the domU's console), qemu.log, times. The result is the
# "XENTEST result" line run.sh prints; the script exits 0 only if the
# domU's suite passed.
#
# Environment: XEN_TEST_TIMEOUT (seconds for the whole VM, default 2400),
# XEN_TEST_MEM (QEMU's MiB, default 4096), XEN_TEST_CPU (QEMU -cpu, default
# max), XEN_TEST_XEN_ARGS (extra Xen command line), XEN_TEST_STAGE
# (dom0: stop after xl info; default all).
#
# Needs root, the VMM root (make vmm-root), the guest kernel (make kernel)
# and the network the first time (the dom0 image).
set -euo pipefail

say() { echo "test-xen: $*" >&2; }
die() {
	echo "test-xen: $*" >&2
	exit 1
}

top=$(cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$top"
[[ $(id -u) -eq 0 ]] || die "needs root"
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go

out=$top/build/xen-test
root=$top/build/xen-root
vmm=$top/build/vmm-root
guest=$top/build/guest
timeout_s=${XEN_TEST_TIMEOUT:-2400}
mem=${XEN_TEST_MEM:-4096}
cpu=${XEN_TEST_CPU:-max}
stage=${XEN_TEST_STAGE:-all}

[[ -f $vmm/.vmm-root-stamp ]] || die "no VMM root at $vmm: make vmm-root"
[[ -f $guest/vmlinuz ]] || die "no guest kernel at $guest: make kernel"

t0=$SECONDS
scripts/xen-root.sh "$root"
say "dom0 image ready ($((SECONDS - t0)) s)"

# The payload disk: the dom0 script, vgpud, vgpuctl, the domU's kernel,
# initramfs and configuration.
rm -rf "$out"
mkdir -p "$out/payload"
p=$out/payload
"$GO" build -o "$p/vgpud" ./cmd/vgpud
"$GO" build -o "$p/vgpuctl" ./cmd/vgpuctl
for prog in vgpu-init vgpu-suite; do
	CGO_ENABLED=0 "$GO" build -trimpath -ldflags=-s -o "$out/$prog" "./guestagent/cmd/$prog"
done
"$GO" run ./guestagent/cmd/vgpu-mkinitramfs -o "$p/initramfs.cpio" \
	-init "$out/vgpu-init" -modules "$guest/modules" -bin "vgpu-suite=$out/vgpu-suite"
cp "$guest/vmlinuz" "$p/vmlinuz"
cp tests/xen/run.sh tests/xen/domu.cfg "$p/"
chmod 755 "$p/run.sh"
echo "$stage" >"$p/stage"
truncate -s 256M "$out/payload.img"
mkfs.ext4 -q -L xentest -d "$p" "$out/payload.img"

xenargs="console=com1 com1=115200,8n1 dom0_mem=1536M,max:1536M dom0_max_vcpus=2 loglvl=all guest_loglvl=all noreboot ${XEN_TEST_XEN_ARGS:-}"
# QEMU's multiboot loader: -initrd is a comma-separated module list, each
# "FILE ARGS"; a comma inside ARGS is written twice.
dom0args="console=hvc0 earlyprintk=xen root=/dev/vda rw panic=-1 systemd.show_status=1"
modules="$root/vmlinuz $dom0args,$root/initrd.img"

say "booting Xen in QEMU (timeout ${timeout_s} s; serial: $out/serial.log)"
tb=$SECONDS
set +e
scripts/vmm-run.sh "$vmm" -- timeout --signal=KILL "$timeout_s" qemu-system-x86_64 \
	-machine pc -accel tcg,thread=multi -cpu "$cpu" -smp 2 -m "$mem" \
	-display none -monitor none -no-reboot \
	-chardev "socket,id=con,path=$out/console.sock,server=on,wait=off,logfile=$out/serial.log" \
	-serial chardev:con \
	-kernel "$root/xen" -append "$xenargs" -initrd "$modules" \
	-drive "file=$root/root.img,if=virtio,format=raw,snapshot=on" \
	-drive "file=$out/payload.img,if=virtio,format=raw" \
	>"$out/qemu.log" 2>&1
rc=$?
set -e
took=$((SECONDS - tb))
say "QEMU exited $rc after $took s"
{
	echo "qemu_rc $rc"
	echo "vm_seconds $took"
	grep -a '^XENTEST ' "$out/serial.log" || true
} >"$out/times"
cat "$out/times" >&2
grep -aq '^XENTEST result pass' "$out/serial.log" || die "no passing result (serial log: $out/serial.log)"
say "pass"
