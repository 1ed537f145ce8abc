#!/bin/sh
# The dom0 side of make test-xen (scripts/test-xen.sh): run by the dom0
# image's xen-test.service from the xentest disk (mounted at /xentest),
# output on dom0's console (hvc0, Xen's console, the VM's serial port).
# Lines starting "XENTEST " are what the host reads: timings (dom0's
# uptime, seconds) and the "XENTEST result pass|fail WHY" line. Powers
# the VM off at the end whatever happens.
set -u
X=/xentest
up() { cut -d' ' -f1 /proc/uptime; }
mark() { echo "XENTEST $* (uptime $(up))"; }
finish() {
	mark "result $1"
	sync
	systemctl poweroff --force --force 2>/dev/null || poweroff -f
}

mark "dom0 up"
uname -a
# The image orders this after xen.service; make sure anyway (it loads
# xen-privcmd and xen-evtchn and starts xenstored and xenconsoled).
systemctl start xen.service
modprobe -a xen-evtchn xen-privcmd xen-gntdev xen-gntalloc 2>/dev/null
if ! xl info; then
	ls -l /proc/xen /dev/xen 2>&1
	finish "fail xl info"
fi
mark "xl info ok"
xl list
xl dmesg | grep -iE 'hvm|svm|hap|shadow|npt' | head -40
if [ "$(cat $X/stage 2>/dev/null)" = dom0 ]; then
	finish "pass dom0 (stage dom0)"
fi

mkdir -p /run/xentest /run/vgpud
$X/vgpud -list-devices 2>&1 | head -20
$X/vgpud -run-dir /run/vgpud -log-level debug >/run/xentest/vgpud.log 2>&1 &
vpid=$!
# vgpud's log on the console as it happens (a hang later still shows it).
tail -f /run/xentest/vgpud.log | grep --line-buffered -v 'level=DEBUG msg="\(mmio\|ioreq\)' | sed -u 's/^/vgpud| /' &
i=0
while ! $X/vgpuctl -socket /run/vgpud/control.sock devices >/dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 $vpid 2>/dev/null; then
		cat /run/xentest/vgpud.log
		finish "fail vgpud did not start"
	fi
	sleep 1
done
mark "vgpud serving"
$X/vgpuctl -socket /run/vgpud/control.sock devices
uuid=5a3c6f1e-7d2b-4c9a-8e11-000000000030
$X/vgpuctl -socket /run/vgpud/control.sock create -profile vgpu-small -uuid $uuid || finish "fail vgpuctl create"

if ! xl create -p $X/domu.cfg; then
	xl dmesg | tail -40
	cat /var/log/xen/*.log 2>/dev/null | tail -40
	finish "fail xl create"
fi
mark "domU created paused"
dom=$(xl domid vgpu-guest)
xl list
if ! $X/vgpuctl -socket /run/vgpud/control.sock attach -xen "$dom" -pci 00:10.0 -ram $((512 << 20)) $uuid; then
	cat /run/xentest/vgpud.log
	xl dmesg | tail -40
	finish "fail vgpuctl attach -xen"
fi
mark "vGPU attached to domain $dom"
: >/run/xentest/domu-serial.log
tail -f /run/xentest/domu-serial.log | sed -u 's/^/domU| /' &
tpid=$!
xl unpause vgpu-guest
mark "domU unpaused"
# Wait for the guest to report (vgpu-init's exit line), or the domain
# to go (on_poweroff destroys it; xenstore, not xl, is asked: xl is a
# heavier process to start every second, and one crashed in libc once
# here under TCG, ending an xl-based loop early).
i=0
while xenstore-exists "/local/domain/$dom" 2>/dev/null; do
	# timeout: one grep here once hung (in futex_wait, single-threaded)
	# under Xen PV on TCG and stalled the loop for good.
	timeout 20 grep -q 'VGPU-INIT exit=' /run/xentest/domu-serial.log && break
	i=$((i + 1))
	if [ $i -gt "${XENTEST_DOMU_TIMEOUT:-1500}" ]; then
		mark "domU timeout"
		xl list
		xl dmesg | tail -60
		break
	fi
	if [ $((i % 60)) -eq 0 ]; then
		mark "domU running ${i}s"
	fi
	sleep 1
done
sleep 5
timeout 60 xl destroy vgpu-guest 2>/dev/null
mark "domU gone"
sleep 1
kill $tpid 2>/dev/null
# tail -f may have missed the last lines: the whole console once more.
echo "--- domU console (complete)"
sed 's/^/domU-log| /' /run/xentest/domu-serial.log
echo "--- vgpud log"
cat /run/xentest/vgpud.log
echo "--- qemu-dm log"
tail -30 /var/log/xen/qemu-dm-vgpu-guest.log 2>/dev/null
echo "--- xl log"
tail -20 /var/log/xen/xl-vgpu-guest.log 2>/dev/null
echo "--- xl dmesg tail"
xl dmesg | tail -40
if grep -q '"fail":0' /run/xentest/domu-serial.log && grep -q 'VGPU-INIT exit=0' /run/xentest/domu-serial.log; then
	finish "pass domU suite"
fi
if grep -q 'VGPU-RESULT' /run/xentest/domu-serial.log; then
	finish "fail domU suite reported failures"
fi
finish "fail domU did not report"
