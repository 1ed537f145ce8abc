#!/usr/bin/env bash
# test-deb.sh DEBDIR ROOT: make test-deb (issue 33). Boots the Debian root
# ROOT (scripts/deb-root.sh) with systemd as its init (systemd-nspawn -b,
# on a tmpfs overlay, so ROOT is never written) and, inside, as an
# operator would:
#
#   vgpud:  dpkg -i (the postinst makes the vgpud group and starts the
#           Type=notify service on PoCL); systemctl is-active; as a user in
#           the vgpud group vgpuctl version, create and list through the
#           group's control socket, and a user outside it refused; an
#           VM attached to the instance by vgpuctl vm (Debian's QEMU 7.2 in
#           the root, the test guest of make guest running vgpu-iterate, a
#           long job that checks its result); five upgrades in place, each
#           by dpkg -i of a newer version (its postinst reloads: vgpuctl
#           upgrade), after each of which systemd follows the new main
#           process (MAINPID), nothing restarted, the instance and its
#           worker process kept, while the VM computes; the VM's job ends
#           with the right result; a kill -9 of the last main process is
#           seen and restarted by systemd; systemctl stop; dpkg --purge.
#   vgpud-guest: dpkg -i; vgpu-agent and vgpu-icdd active (no vGPU here:
#           vgpu-icdd serves none, and the ICD lists no platform); clinfo
#           as an unprivileged user loads the ICD through
#           /etc/OpenCL/vendors/vgpud.icd; dpkg --purge.
#
# Every wait is on the thing (systemctl's own waits, the service's state),
# bounded. Needs root and systemd-nspawn (Debian: systemd-container).
set -euo pipefail

say() { echo "test-deb: $*" >&2; }
fail() {
	echo "test-deb: FAIL: $*" >&2
	exit 1
}

[[ $# -eq 3 ]] || { echo "usage: $0 DEBDIR ROOT GUESTDIR" >&2; exit 2; }
debdir=$(realpath "$1")
root=$(realpath "$2")
guestdir=$(realpath "$3")
for f in vmlinuz initramfs.cpio; do
	[[ -f $guestdir/$f ]] || fail "$guestdir/$f missing: make guest"
done
[[ $(id -u) -eq 0 ]] || fail "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null || fail "systemd-nspawn missing (Debian: systemd-container; make deps)"
vgpud_deb=$(ls "$debdir"/vgpud_*_amd64.deb)
guest_deb=$(ls "$debdir"/vgpud-guest_*_amd64.deb)
start=$SECONDS

# The upgrade's package: the same files as a newer version (dpkg replaces
# /usr/sbin/vgpud: the running daemon's file is then a deleted one).
work=$(mktemp -d /tmp/vgpud-test-deb.XXXXXX)
nspawn=
vm=
cleanup() {
	[[ -n $vm ]] && kill "$vm" 2>/dev/null
	if [[ -n $nspawn ]] && kill -0 "$nspawn" 2>/dev/null; then
		kill -TERM "$nspawn" 2>/dev/null || true
		timeout 60 tail --pid="$nspawn" -f /dev/null || kill -KILL "$nspawn" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/debs"
cp "$vgpud_deb" "$work/debs/vgpud-1.deb"
cp "$guest_deb" "$work/debs/vgpud-guest.deb"
upgrades=5
dpkg-deb -R "$vgpud_deb" "$work/up"
for i in $(seq "$upgrades"); do
	sed -i "s/^Version: .*/Version: $(dpkg-deb -f "$vgpud_deb" Version)+test$i/" "$work/up/DEBIAN/control"
	dpkg-deb --root-owner-group -Zgzip -z1 -b "$work/up" "$work/debs/vgpud-$((i + 1)).deb" >/dev/null
done
rm -rf "$work/up"

# Boot. --keep-unit and --register=no: no systemd (nor its bus) on the
# host to ask for a scope or a machine registration.
say "booting $root with systemd-nspawn -b"
systemd-nspawn -D "$root" --volatile=overlay --register=no --keep-unit --private-network -q -b \
	--machine=vgpud-test-deb --bind-ro="$work/debs:/debs" --bind-ro="$guestdir:/guest" >"$work/console.log" 2>&1 </dev/null &
nspawn=$!
# The container's init is nspawn's child once it is set up.
leader=
for _ in $(seq 300); do
	leader=$(ps --ppid "$nspawn" -o pid= | tr -d ' ' | head -n1) || true
	[[ -n $leader ]] && [[ $(readlink "/proc/$leader/exe" 2>/dev/null) == */systemd ]] && break
	kill -0 "$nspawn" 2>/dev/null || { cat "$work/console.log" >&2; fail "systemd-nspawn exited"; }
	leader=
	sleep 0.1
done
[[ -n $leader ]] || { cat "$work/console.log" >&2; fail "no init in the container after 30 s"; }

# inside CMD...: run CMD in the container (all its namespaces, its root).
inside() { nsenter -t "$leader" -m -u -i -n -p -r -w -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"; }
# as USER CMD...: run CMD in the container as USER, with USER's groups.
as() {
	local u=$1
	shift
	inside setpriv --reuid="$u" --regid="$u" --init-groups env HOME=/ "$@"
}
check() { # check WHAT CMD...: run CMD, fail with WHAT if it fails
	local what=$1
	shift
	"$@" || fail "$what"
}

# systemctl --wait waits for the boot's end once the container's systemd
# answers on its socket, which it does a moment after it starts.
state=
for _ in $(seq 300); do
	state=$(inside timeout 120 systemctl is-system-running --wait 2>/dev/null) || true
	[[ -n $state ]] && break
	sleep 0.1
done
[[ $state == running || $state == degraded ]] || { cat "$work/console.log" >&2; fail "the container's systemd did not finish booting: $state"; }
say "booted ($state, systemd $(inside systemctl --version | head -n1 | cut -d' ' -f2)) in $((SECONDS - start)) s"

# --- vgpud ---
check "dpkg -i vgpud" inside dpkg -i /debs/vgpud-1.deb
check "vgpud.service is not active after the install" inside systemctl -q is-active vgpud.service
check "vgpud.service not enabled" inside systemctl -q is-enabled vgpud.service
check "no vgpud group" inside getent group vgpud
inside useradd -m -G vgpud op
inside useradd -m other
perm=$(inside stat -c '%a %U:%G' /run/vgpud/control.sock)
[[ $perm == "660 root:vgpud" ]] || fail "control socket is $perm, want 660 root:vgpud"
check "vgpuctl version as a member of vgpud" as op vgpuctl version
uuid=$(as op vgpuctl create -profile vgpu-small -name deb-test) || fail "vgpuctl create as a member of vgpud"
as op vgpuctl list | grep -q "$uuid.*deb-test" || fail "the instance is not listed"
if err=$(as other vgpuctl list 2>&1); then fail "a user outside the vgpud group used the control socket"; fi
[[ $err == *"permission denied"* ]] || fail "a user outside the group: $err"
say "vgpud: installed, active, the group's user created $uuid, another user refused"

# A VM on the instance, named by its name, computing through the upgrades:
# vgpuctl vm as the group's user, with the root's QEMU (x-pci-proxy-dev to
# the instance's socket, which the group may use), running vgpu-iterate: at
# least 100 s of launches (-pace: each upgrade now answers after its
# probation, 10 s by default), whose final buffer it checks against the
# CPU.
steps=10000
as op vgpuctl vm -instance deb-test -kernel /guest/vmlinuz -initrd /guest/initramfs.cpio \
	-append "vgpu.run=vgpu-iterate vgpu.args=-steps,$steps,-pace,10ms,-progress,100" >"$work/vm.log" 2>&1 &
vm=$!
timeout 300 bash -c "until grep -q 'ITERATE step' '$work/vm.log'; do kill -0 $vm 2>/dev/null || exit 1; sleep 0.2; done" ||
	{ cat "$work/vm.log" >&2; fail "the VM's job did not start"; }
say "VM computing on $uuid: $(grep -m1 'ITERATE step' "$work/vm.log")"

# Upgrades in place: each newer package's postinst reloads the service.
pid1=$(inside systemctl show -p MainPID --value vgpud.service)
# vgpud's children: its workers and its connection keeper (docs/operating.md
# "The connection keeper"), which ends with the process that started it.
keeper1=$(inside pgrep -P "$pid1" -x vgpud-keeper || true)
[[ -n $keeper1 ]] || fail "no connection keeper under vgpud ($pid1)"
workers1=$(inside pgrep -P "$pid1" -d, || true)
workers1=$(tr , '\n' <<<"$workers1" | grep -vx "$keeper1" | paste -sd, || true)
[[ -n $workers1 ]] || fail "no worker process under vgpud ($pid1) for the instance"
first=$pid1
for i in $(seq "$upgrades"); do
	check "dpkg -i of the newer vgpud ($i)" inside dpkg -i "/debs/vgpud-$((i + 1)).deb"
	pid2=$(inside systemctl show -p MainPID --value vgpud.service)
	[[ $pid2 != "$pid1" && $pid2 != 0 ]] || fail "MainPID after upgrade $i: $pid2 (before: $pid1)"
	check "vgpud.service not active after upgrade $i" inside systemctl -q is-active vgpud.service
	[[ $(inside systemctl show -p NRestarts --value vgpud.service) == 0 ]] || fail "vgpud was restarted, not upgraded in place ($i)"
	# The old process exits once it answered (a zombie until init reaps it).
	inside timeout 30 bash -c "while [[ -e /proc/$pid1 ]] && [[ \$(cut -d' ' -f3 /proc/$pid1/stat 2>/dev/null) != Z ]]; do sleep 0.1; done" ||
		fail "the old vgpud ($pid1) did not exit after upgrade $i"
	as op vgpuctl list | grep -q "$uuid.*deb-test" || fail "the instance is gone after upgrade $i"
	for w in ${workers1//,/ }; do
		inside test -e "/proc/$w" || fail "worker $w did not survive upgrade $i"
	done
	# One keeper, the new process's: the old one's saw the VM's connection
	# open in the new vgpud, closed its copy and exited.
	inside timeout 30 bash -c "until k=\$(pgrep -P $pid2 -x vgpud-keeper) && [[ \$(pgrep -x vgpud-keeper -d,) == \$k ]]; do sleep 0.1; done" ||
		fail "connection keepers after upgrade $i: $(inside pgrep -a -x vgpud-keeper); want the new vgpud's ($pid2) alone"
	[[ $(inside dpkg-query -W -f='${Version}' vgpud) == *+test$i ]] || fail "dpkg does not list version +test$i"
	pid1=$pid2
done
[[ $(inside journalctl -u vgpud.service --no-pager | grep -c "upgrade: handed over") -ge $upgrades ]] ||
	fail "fewer than $upgrades handovers in the journal"
grep -q 'ITERATE OK' "$work/vm.log" && fail "the VM's job ended before the upgrades did: lengthen it"
say "upgraded in place $upgrades times: vgpud pid $first -> $pid2, systemd follows it, no restart, instance and worker(s) $workers1 kept, the VM computing"
rc=0
wait "$vm" || rc=$?
vm=
[[ $rc == 0 ]] || { tail -n 40 "$work/vm.log" >&2; fail "the VM's job failed across the upgrades (vgpuctl vm: exit $rc)"; }
grep -q "ITERATE OK steps=$steps" "$work/vm.log" || { tail -n 40 "$work/vm.log" >&2; fail "the VM's job did not report a correct result"; }
say "the VM's job finished across the upgrades: $(grep -m1 'ITERATE OK' "$work/vm.log")"

# systemd watches the new main process: a crash of it is seen and restarted.
inside kill -KILL "$pid2"
inside timeout 60 bash -c "until [[ \$(systemctl show -p NRestarts --value vgpud.service) == 1 ]]; do sleep 0.1; done" ||
	fail "systemd did not restart vgpud after the new main process was killed"
check "vgpud.service not active after its restart" inside timeout 60 systemctl start vgpud.service
as op vgpuctl list | grep -q "$uuid" || fail "the instance is gone after the restart"
say "kill -9 of the new main process: systemd restarted vgpud, the instance came back"

check "systemctl stop vgpud" inside systemctl stop vgpud.service
if inside systemctl -q is-active vgpud.service; then fail "vgpud.service still active after stop"; fi
# The whole journal first, then the search: grep -q would stop reading at
# the match, and journalctl, still writing, end by SIGPIPE (a failure
# under pipefail).
journal=$(inside journalctl -u vgpud.service --no-pager)
grep -q "shutting down" <<<"$journal" || { tail -n 60 <<<"$journal" >&2; fail "vgpud did not stop gracefully"; }
check "dpkg --purge vgpud" inside dpkg --purge vgpud
inside test ! -e /lib/systemd/system/vgpud.service || fail "the unit is left after purge"
inside test ! -e /etc/vgpud/config.json || fail "the config is left after purge"
if inside pgrep -x vgpud >/dev/null; then fail "a vgpud process is left after purge"; fi
if inside pgrep -x vgpud-keeper >/dev/null; then fail "a connection keeper is left after purge"; fi
say "vgpud: stopped, purged"

# --- vgpud-guest ---
check "dpkg -i vgpud-guest" inside dpkg -i /debs/vgpud-guest.deb
check "vgpu-agent.service not active" inside systemctl -q is-active vgpu-agent.service
check "vgpu-icdd.service not active" inside systemctl -q is-active vgpu-icdd.service
inside test -S /run/vgpud/icd.sock || fail "vgpu-icdd serves no /run/vgpud/icd.sock"
# No vGPU in this root, so the ICD lists no platform (by design: a guest
# without a vGPU sees none); that the loader finds it through
# /etc/OpenCL/vendors/vgpud.icd and loads it for an unprivileged user is
# what glibc's loader says (LD_DEBUG=files).
loaded=$(as other env LD_DEBUG=files clinfo -l 2>&1) || fail "clinfo -l as an unprivileged user: $loaded"
grep -q "file=/usr/lib/x86_64-linux-gnu/vgpud/libvgpud-icd.so .*dynamically loaded by" <<<"$loaded" ||
	fail "the ICD loader did not load the vgpud ICD: $(grep 'file=' <<<"$loaded")"
check "dpkg --purge vgpud-guest" inside dpkg --purge vgpud-guest
if inside systemctl -q is-active vgpu-icdd.service; then fail "vgpu-icdd still active after purge"; fi
say "vgpud-guest: installed, vgpu-agent and vgpu-icdd active, the ICD loaded by clinfo as a user, purged"

say "PASS in $((SECONDS - start)) s"
