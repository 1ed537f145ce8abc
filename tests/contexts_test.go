package tests

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

// contextsCheck runs in the guest (the Debian userland, through the vgpud
// ICD and vgpu-icdd, which gives each process a device context of its
// own): a victim (user victim, uid 1000) keeps a secret in a device buffer and
// computes; an attacker (user nobody) scans memory around its own buffers
// for the secret and for a marker in guest RAM (a root-only file's page),
// then crashes its context with a wild write while the victim computes.
// Before them, 64 processes, each with its own context, compute at once.
const contextsCheck = "#!/bin/sh\n" + userlandCheckFunc + `SECRET=$1
MARKER=$2
mkdir -p /tmp/ctx/ready
chmod -R 1777 /tmp/ctx
printf '%s' "$MARKER" > /root/marker
chmod 600 /root/marker
cat /root/marker > /dev/null
# A second unprivileged user (the userland has root and nobody, and its
# disk is read-only).
for f in passwd group; do cp /etc/$f /run/$f; mount --bind /run/$f /etc/$f; done
echo 'victim:x:1000:1000::/tmp:/bin/sh' >> /etc/passwd
echo 'victim:x:1000:' >> /etc/group
# Each user its own HOME: pyopencl's cache locks are per user.
as() { u=$1; shift; mkdir -p /tmp/h.$u; chown $u /tmp/h.$u; su -p -s /bin/sh -c "HOME=/tmp/h.$u $*" $u; }
# First, on a fresh daemon: 64 processes, each holding its context until
# all 64 have one (ctxjob's barrier), then computing.
cat > /tmp/ctx/sixtyfour <<'EOS'
for i in $(seq 64); do /vgpu/bin/ctxjob /tmp/ctx/ready 64 > /tmp/ctx/job.$i 2>&1 & done
wait
cat /tmp/ctx/job.*
EOS
check sixtyfour as nobody sh /tmp/ctx/sixtyfour
as victim python3 /vgpu/bin/ctx_victim.py $SECRET > /tmp/ctx/victim.out 2>&1 &
victim=$!
i=0
while [ ! -e /tmp/ctx/victim-ready ] && [ $i -lt 6000 ] && kill -0 $victim 2>/dev/null; do sleep 0.1; i=$((i+1)); done
check attacker as nobody python3 /vgpu/bin/ctx_attacker.py $SECRET $MARKER
wait $victim
echo "exit=$?" >> /tmp/ctx/victim.out
check victim cat /tmp/ctx/victim.out
`

// TestGuestContexts (issue 31): isolation between the processes of one
// VM, in a real guest through the ICD, as two unprivileged users. The
// attacker's pointer-casting scan finds its own canary (it reads memory)
// but neither the victim's secret nor the marker in guest RAM; its wild
// write ends its own context while the victim's job runs to a correct
// result; then 64 processes with a context each (the host counts their
// executors) compute at once, each correctly.
func TestGuestContexts(t *testing.T) {
	a := imagetest.RequireApps(t)
	initrd := ctxjobInitramfs(t, a, "ctx-check", contextsCheck, []image.File{
		{Src: "testdata/ctx_victim.py", Dst: image.BinDir + "/ctx_victim.py", Mode: 0o644},
		{Src: "testdata/ctx_attacker.py", Dst: image.BinDir + "/ctx_attacker.py", Mode: 0o644},
	})

	m := hostOn(t, mpqemu.Transport{})
	inst := mustCreate(t, m, "vgpu-small")
	secret, marker := make([]byte, 32), make([]byte, 32)
	rand.Read(secret)
	rand.Read(marker)

	// The most executors the worker has at once: one per live context
	// and the default ring's.
	var most, live atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if pid := inst.WorkerPID(); pid != 0 {
				most.Store(max(most.Load(), int64(len(addrspacetest.Children(pid)))))
			}
			live.Store(max(live.Load(), int64(inst.LiveContexts())))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	out, codes, console := runAppsGuest(t, a, initrd, inst,
		imagetest.AppsBinDir+"/ctx-check,"+hex.EncodeToString(secret)+","+hex.EncodeToString(marker))
	close(stop)
	wg.Wait()
	for _, name := range []string{"attacker", "victim", "sixtyfour"} {
		if _, ok := codes[name]; !ok {
			t.Fatalf("check %s did not finish; console:\n%s", name, console)
		}
	}
	t.Logf("attacker: %s", strings.TrimSpace(out["attacker"]))
	t.Logf("victim: %s", strings.TrimSpace(out["victim"]))
	am := regexp.MustCompile(`ATTACK secret=(\d+) marker=(\d+) canary=(\d+) windows=(\d+) losses=(\d+) wild=(\w+)`).FindStringSubmatch(out["attacker"])
	if am == nil || codes["attacker"] != 0 {
		t.Fatalf("attacker: exit %d, output:\n%s", codes["attacker"], out["attacker"])
	}
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	if n(am[3]) == 0 || n(am[4]) == 0 {
		t.Errorf("the attacker's scan read no window or missed its own canary: it proves nothing (%s)", am[0])
	}
	if n(am[1]) != 0 || n(am[2]) != 0 {
		t.Errorf("the attacker's kernels found the victim's secret %s times and the guest RAM marker %s times", am[1], am[2])
	}
	if am[6] != "lost" {
		t.Errorf("the attacker's wild write did not end its context (%s)", am[6])
	}
	if !strings.Contains(out["victim"], "VICTIM OK") || !strings.Contains(out["victim"], "exit=0") {
		t.Errorf("the victim's job while the attacker crashed:\n%s", out["victim"])
	}
	if ok := strings.Count(out["sixtyfour"], "CTXJOB OK"); ok != 64 || codes["sixtyfour"] != 0 {
		t.Errorf("64 processes: %d computed correctly (exit %d):\n%s", ok, codes["sixtyfour"], out["sixtyfour"])
	}
	// 64 contexts alive at once (the barrier) and the default ring's
	// executor.
	if got := most.Load(); got < 65 {
		t.Errorf("the worker had at most %d executors at once, want 65: the processes did not each get a context", got)
	}
	t.Logf("executors at once: %d, live contexts at once: %d", most.Load(), live.Load())
	for _, l := range strings.Split(out["sixtyfour"], "\n") {
		if !strings.Contains(l, "CTXJOB OK") && !strings.Contains(l, "level=INFO") && !strings.Contains(l, "level=DEBUG") {
			t.Logf("sixtyfour: %s", l)
		}
	}
}

// ctxjobInitramfs is the userland guest's initramfs for tests of device
// contexts through the ICD: the vgpud ICD, vgpu-icdd (and progs), ctxjob
// (testdata/ctxjob.c, built here) and the check script at
// /vgpu/bin/<name>, with extra files.
func ctxjobInitramfs(t *testing.T, a imagetest.Apps, name, script string, extra []image.File, progs ...string) string {
	t.Helper()
	lib := builtICD(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc: %v (scripts/install-deps.sh installs it)", err)
	}
	dir := t.TempDir()
	job := filepath.Join(dir, "ctxjob")
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-o", job, "testdata/ctxjob.c", "-lOpenCL").CombinedOutput(); err != nil {
		t.Fatalf("gcc ctxjob.c: %v\n%s", err, out)
	}
	check := filepath.Join(dir, name)
	if err := os.WriteFile(check, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	files := append([]image.File{
		{Src: lib, Dst: "/lib/vgpud/libvgpud-icd.so", Mode: 0o755},
		{Src: check, Dst: image.BinDir + "/" + name, Mode: 0o755},
		{Src: job, Dst: image.BinDir + "/ctxjob", Mode: 0o755},
	}, extra...)
	return imagetest.AppsInitramfs(t, a, files, append([]string{"github.com/vgpud/vgpud/guestagent/cmd/vgpu-icdd"}, progs...)...)
}
