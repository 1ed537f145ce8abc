package scmrights

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unixPair is the two ends of a connection to a listener in dir.
func unixPair(t *testing.T, dir string) (a, b *net.UnixConn) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if a, err = net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr)); err == nil {
		b, err = l.AcceptUnix()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func protoErr(format string, args ...any) error { return fmt.Errorf("proto: "+format, args...) }

// TestReadHeader: a header's fds arrive with it, in two writes as in one;
// a hang-up before it is io.EOF, within it io.ErrUnexpectedEOF.
func TestReadHeader(t *testing.T) {
	a, b := unixPair(t, t.TempDir())
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	if _, _, err := a.WriteMsgUnix([]byte{1, 2}, unix.UnixRights(efd), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte{3, 4}); err != nil {
		t.Fatal(err)
	}
	hdr, oob := make([]byte, 4), make([]byte, unix.CmsgSpace(4))
	fds, err := ReadHeader(b, hdr, oob, 1, nil, protoErr)
	if err != nil || len(fds) != 1 || string(hdr) != "\x01\x02\x03\x04" {
		t.Fatalf("ReadHeader = %v, %v, header %v; want one fd and 1 2 3 4", fds, err, hdr)
	}
	Close(fds)

	a.Write([]byte{5})
	a.CloseWrite()
	if _, err := ReadHeader(b, hdr, oob, 1, nil, protoErr); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadHeader of half a header = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := ReadHeader(b, hdr, oob, 1, nil, protoErr); !errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadHeader after the hang-up = %v, want io.EOF", err)
	}
}

// TestReadHeaderResumedAfterDeadline: a read deadline that expires
// within a header, with a resume function that clears it, loses no byte
// of the header (a failed read may report -1 bytes: Go's ReadMsgUnix
// does on a deadline).
func TestReadHeaderResumedAfterDeadline(t *testing.T) {
	a, b := unixPair(t, t.TempDir())
	if _, err := a.Write([]byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	resumed := 0
	resume := func(err error) bool {
		if !errors.Is(err, os.ErrDeadlineExceeded) || resumed > 0 {
			return false
		}
		resumed++
		// Not cleared but put off, so that a header read wrong fails
		// rather than waiting for bytes that never come.
		b.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := a.Write([]byte{3, 4}); err != nil {
			t.Error(err)
		}
		return true
	}
	// Once the first read took 1 2, a deadline in the past fails the
	// second, blocked in the kernel's wait.
	go func() {
		waitRead(t, a)
		b.SetReadDeadline(time.Unix(1, 0))
	}()
	hdr, oob := make([]byte, 4), make([]byte, unix.CmsgSpace(4))
	fds, err := ReadHeader(b, hdr, oob, 1, resume, protoErr)
	if err != nil || len(fds) != 0 || string(hdr) != "\x01\x02\x03\x04" || resumed != 1 {
		t.Fatalf("ReadHeader = %v, %v, header %v, resumed %d; want 1 2 3 4 after one resume", fds, err, hdr, resumed)
	}
}

// waitRead waits until a's peer has read everything a wrote (SIOCOUTQ).
func waitRead(t *testing.T, a *net.UnixConn) {
	rc, err := a.SyscallConn()
	if err != nil {
		t.Error(err)
		return
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		n := -1
		rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		if n == 0 {
			return
		}
	}
	t.Error("the peer never read the header's first bytes")
}
