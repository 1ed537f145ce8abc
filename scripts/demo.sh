#!/usr/bin/env bash
# demo.sh: start vgpud on the first OpenCL device, serving vfio-user
# (vgpud -transport vfio-user), create two vGPU instances, boot two QEMU
# 11.1 guests at once (from the VMM root, docs/vmm-root.md, attached with
# vfio-user-pci), each running the correctness suite on its vGPU, and show
# what they did; then boot a third, also on QEMU 11.1, with the Debian
# userland and the vgpud ICD, where Debian's clinfo and a pyopencl program
# run unmodified. Run through `make demo`, which builds build/bin,
# build/guest, build/guest/apps and build/vmm-root first.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/bin
run=$(mktemp -d /tmp/vgpud-demo.XXXXXX)
export VGPUD_SOCKET=$run/control.sock

"$bin/vgpud" -run-dir "$run" -transport vfio-user -metrics-addr 127.0.0.1:0 >"$run/vgpud.out" 2>"$run/vgpud.log" &
vgpud=$!
cleanup() {
	kill "$vgpud" 2>/dev/null || true
	wait "$vgpud" 2>/dev/null || true
	rm -rf "$run"
}
trap cleanup EXIT

# Wait until vgpud says it serves (or dies).
for _ in $(seq 1 300); do
	grep -q '^vgpud ready' "$run/vgpud.out" 2>/dev/null && break
	kill -0 "$vgpud" 2>/dev/null || { cat "$run/vgpud.log" >&2; exit 1; }
	sleep 0.1
done
grep -q '^vgpud ready' "$run/vgpud.out" || { echo "vgpud did not start" >&2; cat "$run/vgpud.log" >&2; exit 1; }

echo "== physical devices"
"$bin/vgpuctl" devices
echo
echo "== vGPU types"
"$bin/vgpuctl" profiles
echo
a=$("$bin/vgpuctl" create -profile vgpu-small)
b=$("$bin/vgpuctl" create -profile vgpu-medium)
echo "== created instances $a (vgpu-small) and $b (vgpu-medium)"
echo
echo "== booting two VMs ($(scripts/vmm-run.sh build/vmm-root -- qemu-system-x86_64 --version | head -1), TCG, vfio-user-pci), each running the vGPU suite"
"$bin/vgpuctl" vm -instance "$a" -append "quiet vgpu.run=vgpu-suite vgpu.args=-seed=1" -prefix "[vm-a] " >"$run/a.log" 2>&1 &
va=$!
"$bin/vgpuctl" vm -instance "$b" -append "quiet vgpu.run=vgpu-suite vgpu.args=-seed=2" -prefix "[vm-b] " >"$run/b.log" 2>&1 &
vb=$!
status=0
wait "$va" || status=1
wait "$vb" || status=1

for v in a b; do
	echo
	echo "== VM $v: QEMU command line and console"
	sed -n '1p' "$run/$v.log"
	# QEMU's own warnings, then the guest program's output from the
	# moment init starts it.
	grep '^qemu-system' "$run/$v.log" || true
	awk '/VGPU-INIT run=/ { on = 1 } on && !/VGPU-RESULT/ && !/^qemu-system/' "$run/$v.log"
done
echo
echo "== what vgpud saw (vgpuctl stats)"
"$bin/vgpuctl" stats
metrics=$(sed -n 's/.* metrics=\([^ ]*\).*/\1/p' "$run/vgpud.out")
if [[ -n $metrics ]] && command -v curl >/dev/null; then
	echo
	echo "== a few Prometheus series from $metrics"
	curl -s "$metrics" | grep -E '^vgpud_instance_(commands|kernel_seconds|copied_bytes)_total' | head -6 || true
fi
for v in a b; do
	grep -q 'VGPU-RESULT {.*"fail":0' "$run/$v.log" || { echo "VM $v: suite failed" >&2; status=1; }
done

# A third VM runs unmodified Debian OpenCL programs through the vgpud ICD
# (docs/icd.md): the userland disk of make guest-apps, the ICD and its
# daemon vgpu-icdd from build/guest/apps/icd.cpio (make guest-icd).
c=$("$bin/vgpuctl" create -profile vgpu-small)
echo
echo "== VM c ($c, vgpu-small): Debian's clinfo and a pyopencl program, unmodified, as an unprivileged user"
"$bin/vgpuctl" vm -instance "$c" -initrd build/guest/apps/icd.cpio -disk build/guest/apps/rootfs.ext4 -mem 1024 \
	-append "quiet vgpu.run=vgpu-apps vgpu.args=/vgpu/bin/icd-demo" -prefix "[vm-c] " >"$run/c.log" 2>&1 || status=1
awk '/VGPU-INIT run=/ { on = 1 } on && !/level=INFO/' "$run/c.log"
grep -q 'VADD OK platform=vgpud' "$run/c.log" || { echo "VM c: the pyopencl program did not compute through the vgpud ICD" >&2; status=1; }

if [[ $status -eq 0 ]]; then
	echo
	echo "demo: three VMs on QEMU 11.1 over vfio-user computed correct results on one shared OpenCL device, one of them with unmodified Debian OpenCL programs"
fi
exit $status
