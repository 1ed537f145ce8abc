package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/libvirt"
)

// TestLibvirtVFIOUser: a domain of libvirt 11.3 (from the VMM root,
// docs/vmm-root.md) on QEMU 11.1 with its vGPU on vfio-user-pci, which
// libvirt 11.3's schema does not have, so the device goes in through
// <qemu:commandline>. The domain's metadata names the instance; `virsh
// start` boots it, QEMU connects to the instance's socket as it starts,
// and the guest runs the vGPU suite to a pass.
func TestLibvirtVFIOUser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts libvirtd from the VMM root and boots a QEMU 11.1 guest under it")
	}
	env := migrationSetup(t)
	_, suiteInitrd := guest(t)
	lv := startVMMLibvirtd(t, "a", "7a6f3d10-5c2e-4b8e-9d41-0a1b2c3d4e01")
	a := startVFIOUserDaemon(t, env, "pthread", "-libvirt", lv.uri)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	id := create(t, a, "vgpu-small")
	base := a.InstanceBase(id)
	dom := lv.define(t, domainSpec{name: "vgpud-test-vu-suite", instance: id, kernel: env.Kernel.Vmlinuz, initrd: suiteInitrd,
		append: "vgpu.wait=3m vgpu.run=vgpu-suite", agent: base + ".agent.sock", vfioUser: base})
	argv := lv.virsh(t, "domxml-to-native", "--format", "qemu-argv", "--domain", dom.name)
	checkMemfdArgv(t, argv)
	lv.virsh(t, "start", "--domain", dom.name)
	if line, err := dom.console.WaitLine(ctx, "VGPU-INIT vgpu="); err != nil {
		t.Fatalf("the guest saw no vGPU: %v\n%s\n%s", err, dom.console, lv.domainLog(dom.name))
	} else {
		t.Logf("guest: %s", line)
	}
	line, err := dom.console.WaitLine(ctx, suite.LinePrefix)
	if err != nil {
		t.Fatalf("no suite result: %v\n%s", err, dom.console)
	}
	var r suite.Report
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, suite.LinePrefix)), &r); err != nil || !r.OK() || r.Pass == 0 {
		t.Fatalf("suite in the libvirt domain: %+v, %v\n%s", r, err, dom.console)
	}
	if _, err := dom.console.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, dom.console)
	}
	t.Logf("suite in libvirt domain %s on QEMU 11.1 over vfio-user: %d passed", dom.name, r.Pass)
}

// checkMemfdArgv checks that the QEMU command line libvirt makes of a
// domain (virsh domxml-to-native) backs guest RAM with a shared memfd
// that is not unsealed: vgpud maps guest RAM only from sealed memfds.
func checkMemfdArgv(t *testing.T, argv string) {
	t.Helper()
	if len(argv) > 64<<10 {
		t.Fatalf("domxml-to-native: %d bytes", len(argv))
	}
	i := strings.Index(argv, `"qom-type":"memory-backend-memfd"`)
	if i < 0 {
		t.Fatalf("libvirt's QEMU command line has no memory-backend-memfd:\n%s", argv)
	}
	obj := argv[i:]
	if j := strings.IndexByte(obj, '}'); j >= 0 {
		obj = obj[:j]
	}
	if !strings.Contains(obj, `"share":true`) || strings.Contains(obj, `"seal":false`) {
		t.Fatalf("guest RAM is not a shared, sealed memfd: %s", obj)
	}
	if !strings.Contains(argv, `"driver":"vfio-user-pci"`) {
		t.Fatalf("libvirt's QEMU command line has no vfio-user-pci device:\n%s", argv)
	}
}

// vmmLibvirtd is a libvirtd from the VMM root that stands for one host:
// its own configuration, state, run, log and cache directories (bound
// over /etc/libvirt, /run, /var/lib/libvirt, /var/log/libvirt and
// /var/cache/libvirt in its private mount namespace, so that two run at
// once and neither touches the host's), its own host UUID, and its
// socket in dir/run/libvirt where the host's virsh reaches it.
type vmmLibvirtd struct {
	*libvirtdProc
	dir string
}

// startVMMLibvirtd starts libvirtd in the foreground from the VMM root
// (scripts/vmm-run.sh) with QEMU's stdio going to files (no virtlogd),
// no per-QEMU mount namespace (it runs in the root's already), QEMU as
// root without relabelling, no cgroups (the host's stay untouched), and waits until its socket accepts. The
// domains still running at the end of the test are destroyed before
// libvirtd is stopped.
func startVMMLibvirtd(t *testing.T, name, hostUUID string) *vmmLibvirtd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: libvirtd runs privileged in a mount namespace of its own")
	}
	root, err := qemuvm.RepoVMMRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "lv"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, sub := range []string{"etc", "run/lock", "lib", "log", "cache"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/dev/shm", filepath.Join(dir, "run", "shm")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(root.Root, "etc", "libvirt")+"/.", filepath.Join(dir, "etc")).CombinedOutput(); err != nil {
		t.Fatalf("copy the root's /etc/libvirt: %v: %s", err, out)
	}
	files := map[string]string{
		"libvirtd.conf": fmt.Sprintf("auth_unix_ro = \"none\"\nauth_unix_rw = \"none\"\nhost_uuid = %q\n"+
			"log_outputs = \"3:file:/var/log/libvirt/libvirtd.log\"\n", hostUUID),
		"qemu.conf": "stdio_handler = \"file\"\nnamespaces = []\nuser = \"root\"\ngroup = \"root\"\n" +
			"dynamic_ownership = 0\nremember_owner = 0\nsecurity_driver = \"none\"\ncgroup_controllers = [ ]\n",
	}
	for f, text := range files {
		if err := os.WriteFile(filepath.Join(dir, "etc", f), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	binds := []struct{ src, dst string }{{"etc", "/etc/libvirt"}, {"run", "/run"}, {"lib", "/var/lib/libvirt"},
		{"log", "/var/log/libvirt"}, {"cache", "/var/cache/libvirt"}}
	var sh strings.Builder
	for _, b := range binds {
		fmt.Fprintf(&sh, "mount --bind %s %s && ", filepath.Join(dir, b.src), b.dst)
	}
	sh.WriteString("exec libvirtd")
	cmd := exec.Command(root.Script, root.Root, "--", "/bin/sh", "-c", sh.String())
	out, err := os.Create(filepath.Join(dir, "libvirtd.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("libvirtd: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	sock := filepath.Join(dir, "run", "libvirt", "libvirt-sock")
	lv := &vmmLibvirtd{libvirtdProc: &libvirtdProc{uri: "qemu:///system?socket=" + sock}, dir: dir}
	t.Cleanup(func() {
		for _, d := range strings.Fields(virshQuiet(lv.uri, "list", "--name")) {
			if strings.HasPrefix(d, testDomainPrefix) {
				virshQuiet(lv.uri, "destroy", "--domain", d)
			}
		}
		// On SIGTERM libvirtd 11.3 here often waits 30 s for a worker and
		// then shuts down forcefully ("Make forcefull daemon shutdown"),
		// with no domain left: after 10 s it is killed instead, which
		// leaves nothing behind (its QEMUs are gone, its directories
		// private and removed).
		cmd.Process.Signal(unix.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			if left := strings.TrimSpace(virshQuiet(lv.uri, "list", "--name")); left != "" {
				t.Errorf("libvirtd %s still runs domains at the end: %q", name, left)
			}
			cmd.Process.Kill()
			<-done
			t.Logf("libvirtd %s had not exited 10 s after SIGTERM: killed", name)
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "log", "libvirtd.log"))
			t.Logf("libvirtd %s log (warnings and errors):\n%s", name, log)
		}
	})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(time.Minute)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			done <- err
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("libvirtd %s ended before its socket answered: %v\n%s", name, err, b)
		case <-limit:
			t.Fatalf("libvirtd %s: no socket at %s within a minute: %v", name, sock, err)
		case <-tick.C:
		}
	}
	lv.removeLeftovers(t)
	return lv
}

// virshQuiet runs virsh on uri and returns its output, ignoring errors
// (cleanup).
func virshQuiet(uri string, args ...string) string {
	out, _ := exec.Command("virsh", append([]string{"-q", "-c", uri}, args...)...).Output()
	return string(out)
}

// domainLog is the domain's QEMU log (stdio_handler "file"), at most its
// last 16 KiB.
func (lv *vmmLibvirtd) domainLog(name string) string {
	b, err := os.ReadFile(filepath.Join(lv.dir, "log", "qemu", name+".log"))
	if err != nil {
		return fmt.Sprintf("domain log: %v", err)
	}
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	return "domain log:\n" + string(b)
}

// vfioUserCommandline is the domain's vGPU on vfio-user-pci at the
// instance's socket base+".vfio-user.sock", and vgpud's monitor at
// base+".qmp".
func vfioUserCommandline(base string) string {
	return libvirt.VFIOUserCommandline(migrate.DefaultDeviceID, base+".vfio-user.sock", base+".qmp", migrate.DefaultSlot)
}

// TestLibvirtVFIOUserMigrate: two libvirtd from the VMM root standing for
// two hosts (own state directories, URIs and host UUIDs), a vgpud with
// -transport vfio-user beside each (A: PoCL pthread, 2 compute units; B:
// basic, 1). `vgpuctl attach -libvirt` gives a shut-off domain on A its
// vGPU (the device goes into its definition, and the domain starts); its
// guest runs a long iterative job whose state lives in device buffers.
// B's instance is created to await the VM (create -incoming), then
// `vgpuctl migrate -libvirt` on A copies the device state while the
// guest computes, quiesces the guest's programs, sends the final round,
// has libvirt move the VM (virsh migrate --live --suspend, with the
// domain's socket paths rewritten to B's run directory), and B runs it.
// The job finishes on B with the guest's CPU reference. Before that, an
// attempt whose virsh migrate fails rolls back: the job goes on on A.
func TestLibvirtVFIOUserMigrate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two libvirtd from the VMM root and migrates a QEMU 11.1 guest between them")
	}
	env := migrationSetup(t)
	lvA := startVMMLibvirtd(t, "a", "7a6f3d10-5c2e-4b8e-9d41-0a1b2c3d4e0a")
	lvB := startVMMLibvirtd(t, "b", "7a6f3d10-5c2e-4b8e-9d41-0a1b2c3d4e0b")
	a := startVFIOUserDaemon(t, env, "pthread", "-libvirt", lvA.uri)
	b := startVFIOUserDaemon(t, env, "basic", "-libvirt", lvB.uri)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()

	id := create(t, a, "vgpu-small")
	const steps = 300
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,300,-pace,15ms,-progress,25"
	dom := lvA.define(t, domainSpec{name: "vgpud-test-vu-migrate", kernel: env.Kernel.Vmlinuz, initrd: env.Initrd,
		append: app, agent: a.InstanceBase(id) + ".agent.sock"})
	t.Cleanup(func() { lvB.remove(dom.name) })
	out, err := a.Ctl(ctx, "attach", "-libvirt", dom.name, id)
	if err != nil || !strings.Contains(out, "added the vGPU (vfio-user-pci) to its definition") {
		t.Fatalf("vgpuctl attach: %v: %s\n%s", err, out, lvA.domainLog(dom.name))
	}
	t.Logf("vgpuctl: %s", strings.TrimSpace(out))
	for _, which := range []string{"--live", "--config"} {
		md, err := libvirt.ParseMetadata([]byte(lvA.virsh(t, "metadata", "--domain", dom.name, "--uri", libvirt.MetadataURI, which)))
		if err != nil || md.Instance != id {
			t.Errorf("the domain's metadata (%s) after attach: %+v, %v", which, md, err)
		}
	}
	checkMemfdArgv(t, lvA.virsh(t, "domxml-to-native", "--format", "qemu-argv", "--domain", dom.name))
	if _, err := dom.console.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s\n%s", err, dom.console, lvA.domainLog(dom.name))
	}

	if out, err := b.Ctl(ctx, "create", "-incoming", "-uuid", id, "-profile", "vgpu-small"); err != nil {
		t.Fatalf("create -incoming on B: %v: %s", err, out)
	}
	// First virsh migrate fails (no libvirtd at the destination URI),
	// after the guest quiesced and the final round went to B: the
	// attempt rolls back and the job goes on on A, on the BAR0 it kept
	// mapped. B discarded its instance; it is created again.
	bad := "qemu+unix:///system?socket=" + filepath.Join(t.TempDir(), "none.sock")
	out, err = a.Ctl(ctx, "migrate", id, "-to", b.MigrateAddr, "-libvirt", dom.name, "-libvirt-to", bad,
		"-uri", "tcp:127.0.0.1:"+freePort(t), "-dest-run-dir", b.RunDir)
	if err == nil || !strings.Contains(out, "rolled back: the VM runs on the source") {
		t.Fatalf("vgpuctl migrate -libvirt to a libvirtd that is not there: %v: %s", err, out)
	}
	t.Logf("failed attempt: %s", strings.TrimSpace(out))
	if line, err := dom.console.WaitLine(ctx, "ITERATE resumed "); err != nil || !strings.Contains(line, "replugged=false kept-mapping=true") {
		t.Fatalf("after the failed attempt the job resumed as %q (%v), want on the same device, BAR0 kept\n%s", line, err, dom.console)
	}
	if line, err := dom.console.WaitLine(ctx, "ITERATE step "); err != nil || !strings.Contains(line, "cus=2") {
		t.Fatalf("after the failed attempt the job went on as %q (%v), want on A's 2-CU device\n%s", line, err, dom.console)
	}
	if out, err := b.Ctl(ctx, "create", "-incoming", "-uuid", id, "-profile", "vgpu-small"); err != nil {
		t.Fatalf("create -incoming on B again: %v: %s", err, out)
	}
	out, err = a.Ctl(ctx, "migrate", id, "-to", b.MigrateAddr, "-libvirt", dom.name, "-libvirt-to", lvB.uri,
		"-uri", "tcp:127.0.0.1:"+freePort(t), "-dest-run-dir", b.RunDir)
	if err != nil {
		t.Fatalf("vgpuctl migrate -libvirt: %v: %s\n%s\nA %s\nB %s", err, out, dom.console, lvA.domainLog(dom.name), lvB.domainLog(dom.name))
	}
	t.Logf("vgpuctl migrate:\n%s", out)
	if !strings.Contains(out, "migrated "+id) || !strings.Contains(out, "QEMU: moved by libvirt (virsh migrate)") {
		t.Errorf("vgpuctl migrate does not say the VM moved by libvirt:\n%s", out)
	}
	if st := strings.TrimSpace(lvB.virsh(t, "domstate", "--domain", dom.name)); st != "running" {
		t.Errorf("the domain on B is %q, want running", st)
	}
	if l := strings.TrimSpace(virshQuiet(lvA.uri, "list", "--name")); strings.Contains(l, dom.name) {
		t.Errorf("the domain still runs on A: %q", l)
	}
	// The console has both QEMUs' lines: the job's steps on A (2
	// compute units), then on B (1), then its result.
	onB := false
	var line string
	for {
		line, err = dom.console.WaitLine(ctx, "ITERATE ")
		if err != nil || strings.HasPrefix(line, "ITERATE OK") || strings.HasPrefix(line, "ITERATE FAIL") {
			break
		}
		onB = onB || (strings.HasPrefix(line, "ITERATE step ") && strings.Contains(line, "cus=1"))
	}
	if err != nil || !strings.HasPrefix(line, fmt.Sprintf("ITERATE OK steps=%d", steps)) {
		t.Fatalf("job result %q, %v\n%s", line, err, dom.console)
	}
	if !onB {
		t.Errorf("the job reported no step on B's 1-CU device\n%s", dom.console)
	}
	if _, err := dom.console.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, dom.console)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}
