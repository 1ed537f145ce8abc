package migratetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/mdev/runstate"
	"github.com/vgpud/vgpud/migrate"
)

// BuildTools builds vgpud and vgpuctl into dir.
func BuildTools(ctx context.Context, dir string) error {
	for _, c := range []string{"vgpud", "vgpuctl"} {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, c), "github.com/vgpud/vgpud/cmd/"+c).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build %s: %w\n%s", c, err, out)
		}
	}
	return nil
}

// Daemon is a real vgpud process, started for a migration test or
// benchmark: its own run directory, one OpenCL device, the migration
// listener on a free port of 127.0.0.1.
type Daemon struct {
	RunDir      string
	MigrateAddr string // host:port of its migration listener
	bin         string
	cmd         *exec.Cmd
	logPath     string
	done        chan error
}

// StartDaemon starts bin/vgpud on device (a gpu.Open selector) with run
// directory runDir and migration TLS directory tlsDir, with env added to
// this process's environment, and waits for its ready line.
func StartDaemon(ctx context.Context, bin, runDir, device, tlsDir string, env ...string) (*Daemon, error) {
	return StartDaemonFlags(ctx, bin, runDir, device, tlsDir, nil, env...)
}

// StartDaemonFlags is StartDaemon with more vgpud flags (e.g. -libvirt
// URI).
func StartDaemonFlags(ctx context.Context, bin, runDir, device, tlsDir string, flags []string, env ...string) (*Daemon, error) {
	d := &Daemon{RunDir: runDir, bin: bin, done: make(chan error, 1)}
	cmd := exec.Command(filepath.Join(bin, "vgpud"), append([]string{"-run-dir", runDir, "-device", device, "-metrics-addr", "",
		"-migrate-tls", tlsDir, "-migrate-listen", "127.0.0.1:0", "-log-level", "info"}, flags...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// A file of its own per start: a daemon restarted on the same run
	// directory must not write over what the killed one's connection
	// keeper, which shares its log, still writes.
	logf, err := os.CreateTemp(runDir, "vgpud-*.log")
	if err != nil {
		return nil, err
	}
	d.logPath = logf.Name()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	d.cmd = cmd
	go func() {
		err := cmd.Wait()
		logf.Close()
		d.done <- err
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case line = <-ready:
	case <-ctx.Done():
		d.Stop()
		return nil, fmt.Errorf("vgpud %s: no ready line: %w", device, ctx.Err())
	}
	_, addr, ok := strings.Cut(strings.TrimSpace(line), " migrate=")
	if !ok {
		d.Stop()
		return nil, fmt.Errorf("vgpud %s: ready line %q has no migrate address\n%s", device, line, d.Logs())
	}
	d.MigrateAddr = addr
	return d, nil
}

// Ctl runs vgpuctl against the daemon's control socket.
func (d *Daemon) Ctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(d.bin, "vgpuctl"),
		append([]string{"-socket", filepath.Join(d.RunDir, "control.sock")}, args...)...).CombinedOutput()
	return string(out), err
}

// Create creates an instance of profile and returns its UUID.
func (d *Daemon) Create(ctx context.Context, profile string) (string, error) {
	out, err := d.Ctl(ctx, "create", "-profile", profile)
	if err != nil {
		return "", fmt.Errorf("create: %w: %s", err, out)
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return "", errors.New("create printed nothing")
	}
	return f[len(f)-1], nil
}

// InstanceBase is where instance id's sockets go: base.sock (QEMU's
// proxy device), base.agent.sock, base.qmp.
func (d *Daemon) InstanceBase(id string) string { return filepath.Join(d.RunDir, "instances", id) }

// Migrate runs vgpuctl migrate ID -to to -uri uri -json with extra flags
// and returns the report, also when the migration failed (err set).
func (d *Daemon) Migrate(ctx context.Context, id, to, uri string, extra ...string) (*migrate.Report, error) {
	args := append([]string{"migrate", id, "-to", to, "-uri", uri, "-json"}, extra...)
	out, err := d.Ctl(ctx, args...)
	end := strings.LastIndexByte(out, '}')
	var rep migrate.Report
	if end < 0 {
		return nil, fmt.Errorf("vgpuctl migrate: %v: %s", err, out)
	}
	if jerr := json.Unmarshal([]byte(out[:end+1]), &rep); jerr != nil {
		return nil, fmt.Errorf("vgpuctl migrate: %v: %s", err, out)
	}
	if err != nil {
		return &rep, fmt.Errorf("vgpuctl migrate: %w: %s", err, out[end+1:])
	}
	return &rep, nil
}

// Logs returns what the daemon logged so far.
func (d *Daemon) Logs() string {
	b, _ := os.ReadFile(d.logPath)
	return string(b)
}

// PID is the process id of the vgpud holding the run directory now (an
// upgrade in place replaces the one StartDaemon started), from its lock
// file; 0 if none.
func (d *Daemon) PID() int {
	b, err := os.ReadFile(filepath.Join(d.RunDir, runstate.LockFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// successor is the PID of the vgpud that took over the run directory
// from the one StartDaemon started (an upgrade in place), or 0.
func (d *Daemon) successor() int {
	if pid := d.PID(); pid > 0 && pid != d.cmd.Process.Pid {
		return pid
	}
	return 0
}

// signalPID sends sig to pid and waits (up to wait) for it to end; false
// if it did not.
func signalPID(pid int, sig syscall.Signal, wait time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return true // gone already
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, int(wait.Milliseconds()))
	return n > 0
}

// Stop interrupts the daemon and waits for it (at most 30 s, then it is
// killed).
func (d *Daemon) Stop() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	if pid := d.successor(); pid > 0 {
		var err error
		if !signalPID(pid, syscall.SIGINT, 30*time.Second) {
			signalPID(pid, syscall.SIGKILL, 10*time.Second)
			err = errors.New("vgpud did not stop in 30 s: killed")
		}
		d.cmd.Process.Kill() // it handed over: it is exiting anyway
		derr := <-d.done
		d.done <- derr
		return err
	}
	d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		err := <-d.done
		d.done <- err
		return fmt.Errorf("vgpud did not stop in 30 s: killed: %w", err)
	}
}

// Kill ends the daemon with SIGKILL, as a crash would, and waits for it.
func (d *Daemon) Kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	if pid := d.successor(); pid > 0 {
		signalPID(pid, syscall.SIGKILL, 10*time.Second)
	}
	d.cmd.Process.Kill()
	err := <-d.done
	d.done <- err
}
