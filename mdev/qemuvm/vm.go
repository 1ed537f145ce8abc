package qemuvm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Bounds on what a VM's console may cost the host.
const (
	maxLineLen   = 64 << 10 // longer lines are split
	maxLines     = 20000    // older lines are dropped
	stderrKeep   = 8 << 10  // tail of QEMU's stderr kept for errors
	tailInErrors = 20       // console lines quoted in errors
	// waitDelay bounds how long Wait waits for QEMU's output after it
	// exited or was killed.
	waitDelay = 5 * time.Second
)

// VM is a running QEMU process.
type VM struct {
	cmd     *exec.Cmd
	cmdline string
	stderr  *tailBuffer
	done    chan struct{} // closed once QEMU exited and its output is drained

	mu sync.Mutex
	// Guarded by mu.
	lines   []line
	changed chan struct{} // closed and replaced when lines grows or QEMU exits
	exited  bool
	waitErr error
}

type line struct {
	text     string
	consumed bool // returned by WaitLine
}

// Start starts QEMU for cfg. The VM lives until the guest powers off, Kill
// is called, or ctx ends (which kills QEMU). The caller must call Wait or
// Kill. Start does not close the devices' descriptors: the caller may close
// them once Start returns.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start qemu: console pipe: %w", err)
	}
	argv := cfg.argv()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), cfg.Env...)
	}
	cmd.Stdin = nil // /dev/null: the guest gets no console input
	cmd.Stdout = pw
	vm := &VM{
		cmd:     cmd,
		cmdline: cfg.CommandLine(),
		stderr:  &tailBuffer{max: stderrKeep},
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	cmd.Stderr = vm.stderr
	if cfg.Stderr != nil {
		cmd.Stderr = io.MultiWriter(vm.stderr, cfg.Stderr)
	}
	cmd.WaitDelay = waitDelay
	for _, d := range cfg.Devices {
		cmd.ExtraFiles = append(cmd.ExtraFiles, d.FD)
	}
	err = cmd.Start()
	pw.Close() // QEMU holds the write end now
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start qemu: %w", err)
	}

	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		defer pr.Close()
		vm.readConsole(pr, cfg.SerialLog)
	}()
	go func() {
		err := cmd.Wait()
		// The console's EOF comes when QEMU (and anything it forked)
		// closed stdout; after a kill it is immediate.
		readerDone.Wait()
		vm.mu.Lock()
		vm.exited = true
		vm.waitErr = err
		close(vm.changed)
		vm.mu.Unlock()
		close(vm.done)
	}()
	return vm, nil
}

// readConsole splits the console into lines until EOF.
func (vm *VM) readConsole(r io.Reader, log io.Writer) {
	br := bufio.NewReaderSize(r, 4096)
	var cur []byte
	for {
		chunk, err := br.ReadSlice('\n')
		cur = append(cur, chunk...)
		full := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if full || len(cur) >= maxLineLen || (err != nil && err != bufio.ErrBufferFull && len(cur) > 0) {
			text := strings.TrimRight(string(cur), "\r\n")
			cur = cur[:0]
			if log != nil {
				// A failing log must not stop the console from draining.
				_, _ = io.WriteString(log, text+"\n")
			}
			vm.addLine(text)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

func (vm *VM) addLine(text string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if len(vm.lines) >= maxLines {
		n := copy(vm.lines, vm.lines[maxLines/10:])
		vm.lines = vm.lines[:n]
	}
	vm.lines = append(vm.lines, line{text: text})
	close(vm.changed)
	vm.changed = make(chan struct{})
}

// Lines returns the console lines so far (the oldest may have been
// dropped after maxLines), with "\r\n" removed.
func (vm *VM) Lines() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	out := make([]string, len(vm.lines))
	for i, l := range vm.lines {
		out[i] = l.text
	}
	return out
}

// WaitLine waits for a console line starting with prefix and returns it.
// Each line is returned at most once: a second WaitLine with the same
// prefix returns the next such line. Lines printed before the call count.
// It fails with ErrExited if QEMU exits first, or with ctx's error.
func (vm *VM) WaitLine(ctx context.Context, prefix string) (string, error) {
	for {
		vm.mu.Lock()
		for i := range vm.lines {
			l := &vm.lines[i]
			if !l.consumed && strings.HasPrefix(l.text, prefix) {
				l.consumed = true
				vm.mu.Unlock()
				return l.text, nil
			}
		}
		if vm.exited {
			err := fmt.Errorf("wait for console line %q: %w (%v)%s", prefix, ErrExited, vm.exitStatusLocked(), vm.diagnosticsLocked())
			vm.mu.Unlock()
			return "", err
		}
		changed := vm.changed
		vm.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			vm.mu.Lock()
			diag := vm.diagnosticsLocked()
			vm.mu.Unlock()
			return "", fmt.Errorf("wait for console line %q: %w%s", prefix, ctx.Err(), diag)
		}
	}
}

func (vm *VM) exitStatusLocked() string {
	if vm.waitErr != nil {
		return vm.waitErr.Error()
	}
	return "exit status 0"
}

// diagnosticsLocked quotes the console's last lines and QEMU's stderr.
func (vm *VM) diagnosticsLocked() string {
	var b strings.Builder
	from := max(0, len(vm.lines)-tailInErrors)
	if from < len(vm.lines) {
		b.WriteString("\nlast console lines:")
		for _, l := range vm.lines[from:] {
			b.WriteString("\n  ")
			b.WriteString(l.text)
		}
	}
	if s := strings.TrimSpace(vm.stderr.String()); s != "" {
		b.WriteString("\nqemu stderr:\n")
		b.WriteString(s)
	}
	return b.String()
}

// Done is closed once QEMU has exited and its console is drained.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// Wait waits for QEMU to exit. It returns nil if QEMU exited with status 0
// (the guest powered off), and otherwise the exit error with QEMU's stderr.
func (vm *VM) Wait() error {
	<-vm.done
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.waitErr == nil {
		return nil
	}
	return fmt.Errorf("qemu: %w%s", vm.waitErr, vm.diagnosticsLocked())
}

// Kill kills QEMU and waits until it is gone. It is safe to call at any
// time and more than once.
func (vm *VM) Kill() {
	select {
	case <-vm.done:
		return
	default:
	}
	// An error means the process already exited; done closes regardless.
	_ = vm.cmd.Process.Kill()
	<-vm.done
}

// CommandLine returns the QEMU command, shell-quoted, for display.
func (vm *VM) CommandLine() string { return vm.cmdline }

// tailBuffer is an io.Writer keeping the last max bytes written.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		p = p[len(p)-t.max:]
	}
	if over := t.buf.Len() + len(p) - t.max; over > 0 {
		t.buf.Next(over)
	}
	t.buf.Write(p)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
