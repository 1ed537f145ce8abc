package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// Runner runs virsh. Exec is the real one; tests use a fake beside it.
type Runner interface {
	// Run runs one virsh command (args after the connection option) with
	// files as its descriptors 3, 4, ... and returns its standard output.
	// A non-zero exit is a *VirshError carrying virsh's error message.
	Run(ctx context.Context, files []*os.File, args ...string) ([]byte, error)
	// Start starts a virsh command that runs until ctx ends (virsh event
	// --loop) and returns its standard output; wait reaps it, after the
	// output has been read to its end, and returns how it ended.
	Start(ctx context.Context, args ...string) (stdout io.ReadCloser, wait func() error, err error)
}

// maxOutput bounds what a virsh command may print: a domain's metadata or
// query-pci is a few KiB.
const maxOutput = 1 << 20

// Exec runs the virsh binary.
type Exec struct {
	// Path is the binary; "" means "virsh" from PATH.
	Path string
	// URI is the libvirt connection (virsh -c); "" lets virsh choose
	// (LIBVIRT_DEFAULT_URI, else qemu:///system for root).
	URI string
}

func (e Exec) command(ctx context.Context, args []string) *exec.Cmd {
	path := e.Path
	if path == "" {
		path = "virsh"
	}
	var all []string
	if e.URI != "" {
		all = append(all, "-c", e.URI)
	}
	// -q: no "Domain 'x' started" chatter; the output is data only.
	all = append(all, "-q")
	cmd := exec.CommandContext(ctx, path, append(all, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C") // messages we match are the untranslated ones
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Run implements Runner.
func (e Exec) Run(ctx context.Context, files []*os.File, args ...string) ([]byte, error) {
	cmd := e.command(ctx, args)
	cmd.ExtraFiles = files
	var out, errb limitedBuffer
	out.max, errb.max = maxOutput, 4096
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return nil, virshError(args, err, errb.String())
	}
	if out.over {
		return nil, fmt.Errorf("virsh %s: more than %d bytes of output", strings.Join(args, " "), maxOutput)
	}
	return out.Bytes(), nil
}

// Start implements Runner.
func (e Exec) Start(ctx context.Context, args ...string) (io.ReadCloser, func() error, error) {
	cmd := e.command(ctx, args)
	errb := &limitedBuffer{max: 4096}
	cmd.Stderr = errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("virsh %s: %w", strings.Join(args, " "), err)
	}
	return out, func() error {
		if err := cmd.Wait(); err != nil {
			return virshError(args, err, errb.String())
		}
		return nil
	}, nil
}

// VirshError is a virsh command that failed.
type VirshError struct {
	Args []string
	// Code is the exit status (-1: killed).
	Code int
	// Message is virsh's error output, trimmed.
	Message string
	err     error
}

func (e *VirshError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.err.Error()
	}
	return fmt.Sprintf("virsh %s: %s", strings.Join(e.Args, " "), msg)
}

func (e *VirshError) Unwrap() error { return e.err }

// Is matches ErrNoDomain and ErrNoMetadata by virsh's messages (virsh
// runs with LC_ALL=C).
func (e *VirshError) Is(target error) bool {
	switch target {
	case ErrNoDomain:
		return strings.Contains(e.Message, "failed to get domain") || strings.Contains(e.Message, "Domain not found")
	case ErrNoMetadata:
		return strings.Contains(e.Message, "metadata not found")
	}
	return false
}

var (
	// ErrNoDomain: libvirt has no such domain.
	ErrNoDomain = errors.New("no such libvirt domain")
	// ErrNoMetadata: the domain's <metadata> has no element of vgpud's
	// namespace.
	ErrNoMetadata = errors.New("no vgpud element in the domain's metadata")
)

func virshError(args []string, err error, stderr string) error {
	e := &VirshError{Args: args, Code: -1, Message: strings.TrimSpace(stderr), err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		e.Code = ee.ExitCode()
	}
	e.Message = strings.TrimPrefix(e.Message, "error: ")
	e.Message = strings.ReplaceAll(e.Message, "\nerror: ", "; ")
	return e
}

// limitedBuffer keeps the first max bytes written to it and notes whether
// more came. It is written by exec's copying goroutine and read after
// Wait, or concurrently for a running command's stderr: hence the lock.
type limitedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:max(room, 0)])
		b.over = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *limitedBuffer) String() string { return string(b.Bytes()) }
