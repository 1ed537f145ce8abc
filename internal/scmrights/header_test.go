package scmrights

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"

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
