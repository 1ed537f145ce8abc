package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// envMainArgs makes this test binary run vgpud's main instead of its
// tests (TestMain): its value is vgpud's arguments, one a line. A test
// starts vgpud so, as a service manager would start the real binary,
// with the descriptors it chooses, and main runs exactly as there.
const envMainArgs = "VGPUD_TEST_MAIN_ARGS"

// runMainIfAsked runs main and exits where envMainArgs is set.
func runMainIfAsked() {
	v, ok := os.LookupEnv(envMainArgs)
	if !ok {
		return
	}
	os.Unsetenv(envMainArgs)
	os.Args = append([]string{"vgpud"}, strings.Split(v, "\n")...)
	main()
	os.Exit(0)
}

// inheritedFD is where the test puts a root-only host file in the
// daemon it starts, without close-on-exec, as the issue found it (a
// directory goes on the next descriptor).
const inheritedFD = 7

// TestInheritedDescriptorsStayInVgpud (issue 40, item 5): vgpud started
// with a root-only host file and a directory on descriptors it inherits
// without close-on-exec (as a careless wrapper or service manager leaves
// them) keeps them from its workers and executors: neither holds them,
// and each holds only descriptors of the kinds it is given or makes (its
// sockets, pipes, anonymous inodes, memory files, /dev/null), no host
// file, no directory.
func TestInheritedDescriptorsStayInVgpud(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	secretDir := filepath.Join(t.TempDir(), "root-only")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret, err := os.OpenFile(filepath.Join(secretDir, "host-secret"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	dir, err := os.Open(secretDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	held := map[string]os.FileInfo{}
	for _, f := range []*os.File{secret, dir} {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		held[f.Name()] = fi
	}

	// vgpud on a short run directory (its sockets' paths must fit).
	runDir, err := os.MkdirTemp("", "vi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envMainArgs+"="+strings.Join([]string{
		"-run-dir", runDir, "-log-level", "warn", "-metrics-addr", ""}, "\n"))
	// ExtraFiles are the child's descriptors 3 up, without close-on-exec.
	cmd.ExtraFiles = make([]*os.File, inheritedFD-3)
	cmd.ExtraFiles = append(cmd.ExtraFiles, secret, dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited, readyLine := make(chan error, 1), make(chan string, 1)
	go func() {
		// The rest of stdout is drained, so that Wait returns.
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		readyLine <- line
		br.WriteTo(nopWriter{})
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("vgpud: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("vgpud did not stop on SIGTERM")
		}
	})
	var line string
	select {
	case line = <-readyLine:
	case <-time.After(2 * time.Minute):
		t.Fatal("vgpud did not get ready")
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "vgpud ready control=")
	if !ok {
		t.Fatalf("ready line %q", line)
	}
	sock, _, _ := strings.Cut(rest, " ")
	vgpud := cmd.Process.Pid

	// vgpud holds them still (close-on-exec, checked from outside).
	for fd := inheritedFD; fd <= inheritedFD+1; fd++ {
		if cloexec, err := procCloexec(vgpud, fd); err != nil || !cloexec {
			t.Errorf("vgpud's inherited fd %d: close-on-exec %v (%v), want true", fd, cloexec, err)
		}
	}

	// A guest that computes: its worker and, on a CPU device, the
	// executors of the worker's device and of the guest's context.
	ctx := context.Background()
	c := control.NewClient(sock)
	info, err := c.Create(ctx, mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	_, d := openGuest(t, info.Socket, driver.Options{})
	defer d.Close()
	buf, err := d.CreateBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(buf, 0, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if info, err = c.Instance(ctx, info.UUID); err != nil {
		t.Fatal(err)
	}
	worker := info.WorkerPID
	if worker == 0 {
		t.Fatal("the instance has no worker")
	}
	if !descendant(worker, vgpud) {
		t.Fatalf("worker %d is not vgpud's (%d)", worker, vgpud)
	}
	execs := addrspacetest.Children(worker)
	t.Logf("vgpud %d, worker %d, executors %v", vgpud, worker, execs)

	// fds lists process pid's descriptors: number to target, and to the
	// file's mode where it can be stat'ed.
	fds := func(role string, pid int) map[int]string {
		paths, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		if err != nil || len(paths) == 0 {
			t.Fatalf("%s %d: no descriptors listed (%v)", role, pid, err)
		}
		m := map[int]string{}
		var list []string
		for _, p := range paths {
			target, err := os.Readlink(p)
			if err != nil {
				continue // closed meanwhile
			}
			fd, _ := strconv.Atoi(filepath.Base(p))
			m[fd] = target
			list = append(list, fmt.Sprintf("%d=%s", fd, target))
			fi, err := os.Stat(p)
			if err != nil {
				continue
			}
			for name, h := range held {
				if os.SameFile(fi, h) {
					t.Errorf("%s %d holds vgpud's inherited %s on fd %d", role, pid, name, fd)
				}
			}
			if !expectedFD(target, fi.Mode()) {
				t.Errorf("%s %d: fd %d -> %s (%v) is none of what it is given or makes", role, pid, fd, target, fi.Mode())
			}
		}
		t.Logf("%s %d holds %s", role, pid, strings.Join(list, " "))
		return m
	}
	// The worker: what it was given (stdin and stdout /dev/null, stderr
	// the log pipe, fd 3 its protocol socket), then what it made.
	w := fds("worker", worker)
	if !strings.HasPrefix(w[2], "pipe:") || !strings.HasPrefix(w[3], "socket:") {
		t.Errorf("worker %d: stderr %q, fd 3 %q; want the log pipe and the protocol socket", worker, w[2], w[3])
	}
	// An executor: /dev/null, the worker's stderr, its one socket, the
	// pipes of its standard-output capture (worker/child/kernelout: fd 1
	// on a pipe it drains, and the drain's stop pipe), which no other
	// process holds, and what the runtime makes (no other pipe, no
	// other socket).
	workerHolds := map[string]bool{}
	for _, target := range w {
		workerHolds[target] = true
	}
	for _, e := range execs {
		x := fds("executor", e)
		sockets := 0
		own := map[string]bool{}
		for fd, target := range x {
			switch {
			case strings.HasPrefix(target, "socket:"):
				sockets++
			case fd == 2 && target == w[2]:
			case strings.HasPrefix(target, "pipe:") && workerHolds[target]:
				t.Errorf("executor %d: fd %d -> %s, a pipe of its worker's other than its stderr (%s)", e, fd, target, w[2])
			case strings.HasPrefix(target, "pipe:"):
				own[target] = true
			}
		}
		if sockets != 1 {
			t.Errorf("executor %d holds %d sockets, want 1 (its end of the executor protocol)", e, sockets)
		}
		if !own[x[1]] || len(own) > 2 {
			t.Errorf("executor %d: stdout %q and %d pipes of its own, want stdout on one of at most 2 (its output capture)", e, x[1], len(own))
		}
	}
	if len(execs) == 0 {
		t.Logf("worker %d has no executor (kernels in the worker on this device): the executors are not checked", worker)
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }

// expectedFD reports whether a descriptor's target is of a kind a worker
// or executor is given or makes itself: sockets and pipes (its protocol,
// executor and stderr), anonymous inodes (epoll, eventfds, timers,
// pidfds), memory files (guest RAM, buffers) and device nodes (/dev/null,
// a GPU's); a host file or directory would come from elsewhere.
func expectedFD(target string, mode os.FileMode) bool {
	for _, p := range []string{"socket:[", "pipe:[", "anon_inode:", "/memfd:"} {
		if strings.HasPrefix(target, p) {
			return true
		}
	}
	return mode&os.ModeCharDevice != 0
}

// procCloexec reports whether process pid's descriptor fd is
// close-on-exec, from /proc/pid/fdinfo.
func procCloexec(pid, fd int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				return false, err
			}
			return flags&syscall.O_CLOEXEC != 0, nil
		}
	}
	return false, fmt.Errorf("fdinfo of %d/%d has no flags", pid, fd)
}

// descendant reports whether pid descends from ancestor.
func descendant(pid, ancestor int) bool {
	for pid > 1 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The parent is the second field after the command's closing
		// parenthesis.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			return false
		}
		if pid, _ = strconv.Atoi(f[1]); pid == ancestor {
			return true
		}
	}
	return false
}
