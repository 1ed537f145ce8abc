package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/vgpud/vgpud/worker/child"
	"github.com/vgpud/vgpud/worker/sandbox"
	"golang.org/x/sys/unix"
)

// DiagnoseConfig says what Diagnose runs.
type DiagnoseConfig struct {
	// Executable is this program (a worker is it run again); empty: this
	// process's.
	Executable string
	// Policy confines the worker (Private, Diagnose and NotifyFD are set
	// by Diagnose).
	Policy sandbox.Policy
	// Device selects the device (gpu.Open) the worker runs its kernel on.
	Device string
	// Dir holds the worker's private directory for the run; empty: the
	// system's temporary directory.
	Dir string
}

// Diagnosis is what Diagnose saw.
type Diagnosis struct {
	// SelfTest is what the worker's kernel run did; Step "" when the
	// worker printed none.
	SelfTest child.SelfTest `json:"self_test"`
	// Exit is the worker's exit status.
	Exit string `json:"exit"`
	// Stderr is what the worker wrote on its standard error (its log
	// lines; untrusted), cut to its last 8 KiB.
	Stderr string `json:"stderr,omitempty"`
	// Denials is everything the sandbox refused it, in the order first
	// seen.
	Denials []sandbox.Denial `json:"denials"`
}

// OK reports whether the worker's kernel ran right.
func (d Diagnosis) OK() bool { return d.SelfTest.Step == "done" && d.SelfTest.Err == "" }

// Diagnose runs one kernel in a worker confined by cfg.Policy with its
// seccomp filter in diagnosis mode (sandbox.Policy.Diagnose): every
// system call the filter refuses, and every file the worker looks for
// that its file view or Landlock keeps from it, is recorded by a
// supervisor in this process. It is vgpud -sandbox-diagnose: an operator
// on a new GPU learns what the policy must allow (docs/sandbox.md).
func Diagnose(ctx context.Context, cfg DiagnoseConfig) (Diagnosis, error) {
	exe := cfg.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return Diagnosis{}, fmt.Errorf("diagnose: %w", err)
		}
	}
	dir, err := os.MkdirTemp(cfg.Dir, "vgpud-diagnose-")
	if err != nil {
		return Diagnosis{}, fmt.Errorf("diagnose: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o700); err != nil {
		return Diagnosis{}, fmt.Errorf("diagnose: %w", err)
	}
	if err := sandbox.PrepareDir(dir); err != nil {
		return Diagnosis{}, fmt.Errorf("diagnose: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return Diagnosis{}, fmt.Errorf("diagnose: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "diagnose-notify"), os.NewFile(uintptr(fds[1]), "diagnose-notify-worker")
	defer ours.Close()

	pol := cfg.Policy
	pol.Off = false
	pol.Private, pol.Diagnose, pol.NotifyFD = dir, true, child.ProtocolFD
	cmd := exec.Command(exe)
	cmd.Args = []string{"vgpud-worker", child.RoleWorker}
	cmd.Env = append(workerEnv(os.Environ(), dir, slog.LevelInfo), child.EnvSelfTest+"="+cfg.Device)
	cmd.Dir = dir
	cmd.ExtraFiles = []*os.File{theirs}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &tailBuffer{max: 8 << 10, b: &stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := pol.Apply(cmd); err != nil {
		theirs.Close()
		return Diagnosis{}, fmt.Errorf("diagnose: %w", err)
	}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return Diagnosis{}, fmt.Errorf("diagnose: start the worker: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()

	var d Diagnosis
	listener, lerr := receiveListener(ours)
	var sup *sandbox.Supervisor
	if lerr == nil {
		if sup, lerr = sandbox.Supervise(listener, pol); lerr != nil {
			listener.Close()
			_ = cmd.Process.Kill()
		}
	}
	werr := cmd.Wait()
	if sup != nil {
		denials, serr := sup.Stop()
		d.Denials = denials
		if serr != nil && lerr == nil {
			lerr = serr
		}
	}
	d.Exit = "exit status 0"
	if werr != nil {
		d.Exit = werr.Error()
	}
	d.Stderr = stderr.String()
	line, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), "\n")
	if line != "" {
		if err := json.Unmarshal([]byte(line), &d.SelfTest); err != nil {
			d.SelfTest = child.SelfTest{Err: fmt.Sprintf("unreadable self-test output %q: %v", line, err)}
		}
	}
	if lerr != nil {
		return d, fmt.Errorf("diagnose: %w (worker: %s)", lerr, d.Exit)
	}
	if ctx.Err() != nil {
		return d, fmt.Errorf("diagnose: %w", ctx.Err())
	}
	return d, nil
}

// receiveListener is sandbox.ReceiveListener, with what a failure means.
func receiveListener(sock *os.File) (*os.File, error) {
	l, err := sandbox.ReceiveListener(sock)
	if err != nil {
		return nil, errors.Join(err, errors.New("the worker ended before its seccomp filter was in place (its stderr says why)"))
	}
	return l, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   *bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}
