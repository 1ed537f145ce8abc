package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/migrate/libvirt"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// TestLibvirt: VMs managed by a real libvirtd that the test starts.
//
//  1. A domain whose <metadata> names a vGPU instance is started with
//     virsh; vgpud -libvirt sees it start, hot-plugs the vGPU, and the
//     guest (which waits for it: vgpu.wait) runs the vGPU suite to a pass.
//  2. `vgpuctl attach -libvirt` gives a shut-off domain an instance: the
//     domain is started paused, plugged, resumed, and the instance is
//     recorded in its metadata. Its guest runs a long job; vgpud is killed
//     (SIGKILL) and started again: it finds the running domain through
//     its metadata, replaces the proxy device left on the dead socket,
//     and the guest reports the lost device state and finishes its job
//     with a correct result, without the VM being restarted.
func TestLibvirt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts libvirtd and boots two QEMU guests under it")
	}
	env := migrationSetup(t)
	_, suiteInitrd := guest(t)
	lv := startLibvirtd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	runDir := t.TempDir()
	flags := []string{"-libvirt", lv.uri}
	a, err := migratetest.StartDaemonFlags(ctx, env.Bin, runDir, "pthread", env.TLSDir, flags, "POCL_DEVICES=pthread basic")
	if err != nil {
		t.Fatal(err)
	}
	cur := a // the daemon running now, for the log on failure
	t.Cleanup(func() {
		cur.Stop()
		if t.Failed() {
			t.Logf("vgpud log:\n%s", cur.Logs())
		}
	})

	// 1. Automatic: the domain names its instance and is started by virsh.
	id1 := create(t, a, "vgpu-small")
	auto := lv.define(t, domainSpec{name: "vgpud-test-auto", instance: id1, kernel: env.Kernel.Vmlinuz, initrd: suiteInitrd,
		append: "vgpu.wait=3m vgpu.run=vgpu-suite", agent: a.InstanceBase(id1) + ".agent.sock"})
	lv.virsh(t, "start", "--domain", auto.name)
	if line, err := auto.console.WaitLine(ctx, "VGPU-INIT vgpu="); err != nil {
		t.Fatalf("the guest saw no vGPU: %v\n%s", err, auto.console)
	} else {
		t.Logf("guest: %s", line)
	}
	line, err := auto.console.WaitLine(ctx, suite.LinePrefix)
	if err != nil {
		t.Fatalf("no suite result: %v\n%s", err, auto.console)
	}
	var r suite.Report
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, suite.LinePrefix)), &r); err != nil || !r.OK() || r.Pass == 0 {
		t.Fatalf("suite in the libvirt domain: %+v, %v\n%s", r, err, auto.console)
	}
	if _, err := auto.console.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, auto.console)
	}
	t.Logf("suite in libvirt domain %s: %d passed", auto.name, r.Pass)
	if _, ok := logLine(a.Logs(), `msg="libvirt domain got its vGPU"`, "domain="+auto.name, "action=hotplugged"); !ok {
		t.Errorf("vgpud did not log plugging %s", auto.name)
	}

	// 2. By hand, then across a crash of vgpud.
	id2 := create(t, a, "vgpu-small")
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,300,-pace,15ms,-progress,25,-recover,1"
	man := lv.define(t, domainSpec{name: "vgpud-test-attach", kernel: env.Kernel.Vmlinuz, initrd: env.Initrd,
		append: app, agent: a.InstanceBase(id2) + ".agent.sock"})
	out, err := a.Ctl(ctx, "attach", "-libvirt", man.name, id2)
	if err != nil || !strings.Contains(out, "started it paused") {
		t.Fatalf("vgpuctl attach: %v: %s", err, out)
	}
	t.Logf("vgpuctl: %s", strings.TrimSpace(out))
	for _, which := range []string{"--live", "--config"} {
		md, err := libvirt.ParseMetadata([]byte(lv.virsh(t, "metadata", "--domain", man.name, "--uri", libvirt.MetadataURI, which)))
		if err != nil || md.Instance != id2 {
			t.Errorf("the domain's metadata (%s) after attach: %+v, %v", which, md, err)
		}
	}
	if _, err := man.console.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, man.console)
	}
	a.Kill()
	b, err := migratetest.StartDaemonFlags(ctx, env.Bin, runDir, "pthread", env.TLSDir, flags, "POCL_DEVICES=pthread basic")
	if err != nil {
		t.Fatalf("restart on the same run directory: %v", err)
	}
	cur = b
	lost, err := man.console.WaitLine(ctx, "ITERATE LOST")
	if err != nil {
		t.Fatalf("the guest was not told its device state was lost: %v\n%s", err, man.console)
	}
	if !strings.Contains(lost, "commands in flight were lost") {
		t.Errorf("the loss report %q does not say what was lost", lost)
	}
	if _, err := man.console.WaitLine(ctx, "ITERATE RECOVERED"); err != nil {
		t.Fatalf("the guest did not reopen the re-plugged device: %v\n%s", err, man.console)
	}
	line, err = man.console.WaitLine(ctx, "ITERATE OK")
	if err != nil || !strings.HasPrefix(line, "ITERATE OK steps=300") {
		t.Fatalf("job result %q, %v\n%s", line, err, man.console)
	}
	if _, err := man.console.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, man.console)
	}
	if line, ok := logLine(b.Logs(), `msg="libvirt domain got its vGPU"`, "domain="+man.name, "action=reattached"); ok {
		t.Logf("%s", line)
	} else {
		t.Errorf("the restarted vgpud did not log reattaching %s", man.name)
	}
}

// logLine returns the first line of logs that has every part.
func logLine(logs string, parts ...string) (string, bool) {
	for line := range strings.Lines(logs) {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return strings.TrimSpace(line), true
		}
	}
	return "", false
}

// testLibvirtDir holds the test libvirtd's configuration, sockets, pid
// files and log. It is fixed, not temporary, so that a run killed before
// its cleanup leaves a daemon the next run can recognise and stop: the
// qemu driver of a privileged libvirtd keeps its state in /run/libvirt
// and /var/lib/libvirt whatever the configuration says, so two of them
// cannot run at once.
const testLibvirtDir = "/run/vgpud-test-libvirt"

// testDomainPrefix starts the name of every domain the test defines; the
// test removes leftovers with it.
const testDomainPrefix = "vgpud-test-"

// libvirtdProc is the libvirtd the test uses: one it started, or the
// host's.
type libvirtdProc struct {
	uri string
}

// startLibvirtd starts libvirtd with its own configuration file and
// socket directory (and virtlogd, which libvirt's QEMU driver needs,
// unless one already serves), without systemd, and stops them at the end
// of the test.
func startLibvirtd(t *testing.T) *libvirtdProc {
	t.Helper()
	for _, bin := range []string{"libvirtd", "virtlogd", "virsh"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install libvirt-daemon-system and libvirt-clients (make deps)", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root: the test runs a privileged libvirtd (qemu:///system), as vgpud's hosts do")
	}
	if c, err := net.Dial("unix", "/run/libvirt/libvirt-sock"); err == nil {
		// The host runs libvirtd (systemd started it when the package was
		// installed): a second one could not take the qemu driver's state.
		c.Close()
		t.Log("using the host's libvirtd (qemu:///system) rather than starting one")
		lv := &libvirtdProc{uri: "qemu:///system"}
		lv.removeLeftovers(t)
		return lv
	}
	dir := testLibvirtDir
	if err := os.MkdirAll(filepath.Join(dir, "sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	// One test libvirtd at a time, across test processes.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	conf := filepath.Join(dir, "libvirtd.conf")
	logPath := filepath.Join(dir, "libvirtd.log")
	for _, stale := range []string{"libvirtd", "virtlogd"} {
		if err := stopDaemon(filepath.Join(dir, stale+".pid"), stale, dir); err != nil {
			t.Fatalf("a %s left by an earlier run: %v", stale, err)
		}
	}
	os.Remove(logPath)
	cfg := fmt.Sprintf("unix_sock_dir = %q\nauth_unix_ro = \"none\"\nauth_unix_rw = \"none\"\nlog_outputs = \"3:file:%s\"\n",
		filepath.Join(dir, "sock"), logPath)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", "/run/libvirt/virtlogd-sock"); err == nil {
		c.Close() // one serves already (the host's): libvirtd uses it
	} else {
		if out, err := exec.Command("virtlogd", "-d", "-p", filepath.Join(dir, "virtlogd.pid")).CombinedOutput(); err != nil {
			t.Fatalf("virtlogd -d: %v: %s", err, out)
		}
		t.Cleanup(func() {
			if err := stopDaemon(filepath.Join(dir, "virtlogd.pid"), "virtlogd", dir); err != nil {
				t.Errorf("stop virtlogd: %v", err)
			}
		})
	}
	// -d returns once the sockets are set up; the drivers initialise
	// after that, and a client waits in the socket's backlog until they
	// have (or finds the daemon gone, its log saying why).
	if out, err := exec.Command("libvirtd", "-d", "-f", conf, "-p", filepath.Join(dir, "libvirtd.pid")).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("libvirtd -d: %v: %s\n%s", err, out, log)
	}
	lv := &libvirtdProc{uri: "qemu:///system?socket=" + filepath.Join(dir, "sock", "libvirt-sock")}
	t.Cleanup(func() {
		if err := stopDaemon(filepath.Join(dir, "libvirtd.pid"), "libvirtd", dir); err != nil {
			t.Errorf("stop libvirtd: %v", err)
		}
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("libvirtd log (warnings and errors):\n%s", log)
		}
	})
	lv.removeLeftovers(t)
	return lv
}

// removeLeftovers removes the domains an earlier, killed run left defined.
func (lv *libvirtdProc) removeLeftovers(t *testing.T) {
	for _, name := range strings.Fields(lv.virsh(t, "list", "--all", "--name")) {
		if strings.HasPrefix(name, testDomainPrefix) {
			lv.remove(name)
		}
	}
}

// stopDaemon stops the daemon whose pid file is pidFile if it is name
// and was started with an argument under dir (one this test started),
// and waits for it to exit; nothing else is signalled.
func stopDaemon(pidFile, name, dir string) error {
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("pid file %s: %q", pidFile, b)
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if strings.TrimSpace(string(comm)) != name || !strings.Contains(string(args), dir) {
		os.Remove(pidFile)
		return nil // gone, or the number is another process's now
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		return fmt.Errorf("SIGTERM %s %d: %w", name, pid, err)
	}
	// The pidfd turns readable when the process exits.
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000); err != nil || n == 0 {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		return fmt.Errorf("%s %d did not exit within 30 s of SIGTERM (killed): %v", name, pid, err)
	}
	os.Remove(pidFile)
	return nil
}

// virsh runs virsh on the test libvirtd, failing the test on error.
func (lv *libvirtdProc) virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", lv.uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// remove destroys and undefines a domain, quietly.
func (lv *libvirtdProc) remove(name string) {
	exec.Command("virsh", "-q", "-c", lv.uri, "destroy", "--domain", name).Run()
	exec.Command("virsh", "-q", "-c", lv.uri, "undefine", "--domain", name).Run()
}

// domainSpec is a test domain: a direct kernel boot of the test guest
// with a vGPU instance named in its metadata (instance "": none).
type domainSpec struct {
	name, instance         string
	kernel, initrd, append string
	// agent is the instance's guest agent socket.
	agent string
	// vfioUser, if set, is the instance's socket base
	// (Daemon.InstanceBase): the domain has the vGPU as a vfio-user-pci
	// device at migrate.DefaultSlot, and vgpud's monitor, by
	// <qemu:commandline> (QEMU 11.1; libvirt 11.3 has no such device).
	vfioUser string
}

// testDomain is a defined domain and its serial console.
type testDomain struct {
	name    string
	console *consoleLog
}

// domainXML is the domain. What the vGPU needs of it: ACPI (pci.0
// refuses hotplug without), guest RAM in a shared memfd (QEMU passes
// guest memory to vgpud only then), the agent channel (a virtio-serial
// port reconnecting to vgpud's socket). The serial console connects to
// the test's socket; QEMU runs as root (a static DAC label, no
// relabelling), as vgpud's sockets are root's.
const domainXML = `<domain type='qemu'>
  <name>{{name}}</name>
  <metadata>{{metadata}}</metadata>
  <memory unit='MiB'>512</memory>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{{kernel}}</kernel>
    <initrd>{{initrd}}</initrd>
    <cmdline>console=ttyS0 panic=-1 {{append}}</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='unix'>
      <source mode='connect' path='{{console}}'/>
      <target port='0'/>
    </serial>
    <channel type='unix'>
      <source mode='connect' path='{{agent}}'><reconnect enabled='yes' timeout='1'/></source>
      <target type='virtio' name='org.vgpud.agent.0'/>
    </channel>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>
</domain>
`

// define defines the domain (removed at the end of the test) with its
// console socket listening.
func (lv *libvirtdProc) define(t *testing.T, s domainSpec) *testDomain {
	t.Helper()
	dir := t.TempDir()
	d := &testDomain{name: s.name, console: listenConsole(t, filepath.Join(dir, "console.sock"))}
	meta := ""
	if s.instance != "" {
		meta = fmt.Sprintf(`<vgpud:vgpu xmlns:vgpud=%q instance=%q/>`, libvirt.MetadataURI, s.instance)
	}
	xml := strings.NewReplacer("{{name}}", s.name, "{{metadata}}", meta, "{{kernel}}", s.kernel, "{{initrd}}", s.initrd,
		"{{append}}", s.append, "{{console}}", filepath.Join(dir, "console.sock"), "{{agent}}", s.agent).Replace(domainXML)
	if s.vfioUser != "" {
		xml = strings.Replace(xml, "<domain type='qemu'>", "<domain type='qemu' xmlns:qemu='"+libvirt.QEMUNamespace+"'>", 1)
		xml = strings.Replace(xml, "</domain>", vfioUserCommandline(s.vfioUser)+"</domain>", 1)
	}
	path := filepath.Join(dir, "domain.xml")
	if err := os.WriteFile(path, []byte(xml), 0o600); err != nil {
		t.Fatal(err)
	}
	lv.virsh(t, "define", "--file", path)
	t.Cleanup(func() { lv.remove(s.name) })
	return d
}

// consoleLog is a domain's serial console: QEMU connects to its socket
// and the lines are kept for WaitLine. It takes every QEMU that connects
// (a migration's destination QEMU connects while the source's still
// is), the lines of all in the order they come; it ends when the last
// connection does.
type consoleLog struct {
	mu      sync.Mutex
	lines   []string
	next    int           // the first line WaitLine has not consumed
	changed chan struct{} // closed and replaced on each line and at the end
	ended   bool
	open    int // connections not ended
}

func listenConsole(t *testing.T, path string) *consoleLog {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := &consoleLog{changed: make(chan struct{})}
	var wg sync.WaitGroup
	var connMu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			cn, err := l.Accept()
			if err != nil {
				return
			}
			connMu.Lock()
			conns = append(conns, cn)
			connMu.Unlock()
			c.mu.Lock()
			c.open++
			c.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.end()
				sc := bufio.NewScanner(cn)
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				for sc.Scan() {
					c.add(strings.TrimRight(sc.Text(), "\r"))
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		connMu.Lock()
		for _, cn := range conns {
			cn.Close()
		}
		connMu.Unlock()
		wg.Wait()
	})
	return c
}

func (c *consoleLog) add(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, line)
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *consoleLog) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open--; c.open > 0 {
		return
	}
	c.ended = true
	close(c.changed)
	c.changed = make(chan struct{})
}

// WaitLine returns the next line starting with prefix that an earlier
// WaitLine did not pass over.
func (c *consoleLog) WaitLine(ctx context.Context, prefix string) (string, error) {
	for {
		c.mu.Lock()
		for ; c.next < len(c.lines); c.next++ {
			if l := c.lines[c.next]; strings.HasPrefix(l, prefix) {
				c.next++
				c.mu.Unlock()
				return l, nil
			}
		}
		ended, changed := c.ended, c.changed
		c.mu.Unlock()
		if ended {
			return "", fmt.Errorf("console closed (the VM is gone) before a line %q", prefix)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for a line %q: %w", prefix, ctx.Err())
		}
	}
}

// String is the console so far.
func (c *consoleLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "console:\n" + strings.Join(c.lines, "\n")
}
