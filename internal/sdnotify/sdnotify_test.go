package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// manager is a fake service manager: a datagram socket that records each
// message and, like systemd, closes a barrier's descriptor once read.
type manager struct {
	conn *net.UnixConn
	msgs chan string
	// holdBarrier keeps barrier descriptors open (a manager that hangs).
	holdBarrier bool
	held        []int
}

func listen(t *testing.T, addr string, hold bool) *manager {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	m := &manager{conn: conn, msgs: make(chan string, 16), holdBarrier: hold}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			buf, oob := make([]byte, 4096), make([]byte, 128)
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			var fds []int
			if oobn > 0 {
				cms, err := syscall.ParseSocketControlMessage(oob[:oobn])
				if err != nil {
					m.msgs <- "bad control message: " + err.Error()
					continue
				}
				for _, cm := range cms {
					got, err := syscall.ParseUnixRights(&cm)
					if err == nil {
						fds = append(fds, got...)
					}
				}
			}
			msg := string(buf[:n])
			if len(fds) > 0 {
				msg += fmt.Sprintf(" +%dfd", len(fds))
			}
			for _, fd := range fds {
				if m.holdBarrier {
					m.held = append(m.held, fd)
				} else {
					syscall.Close(fd)
				}
			}
			m.msgs <- msg
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
		for _, fd := range m.held {
			syscall.Close(fd)
		}
	})
	return m
}

func (m *manager) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-m.msgs:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the fake manager got no message")
		return ""
	}
}

func TestNotifyPathAndAbstract(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	abstract := "@vgpud-sdnotify-test-" + strconv.Itoa(os.Getpid())
	for _, addr := range []string{path, abstract} {
		m := listen(t, addr, false)
		t.Setenv(EnvSocket, addr)
		if err := Notify("READY=1\nSTATUS=serving"); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if got := m.next(t); got != "READY=1\nSTATUS=serving" {
			t.Errorf("%s: got %q", addr, got)
		}
	}
}

func TestNoManager(t *testing.T) {
	t.Setenv(EnvSocket, "")
	if err := Notify("READY=1"); err != nil {
		t.Errorf("Notify with no manager: %v", err)
	}
	if err := MainPID(os.Getpid(), time.Second); err != nil {
		t.Errorf("MainPID with no manager: %v", err)
	}
}

func TestBadSocket(t *testing.T) {
	t.Setenv(EnvSocket, "relative/path")
	if err := Notify("READY=1"); err == nil || !strings.Contains(err.Error(), "neither a path") {
		t.Errorf("relative NOTIFY_SOCKET: %v", err)
	}
	t.Setenv(EnvSocket, filepath.Join(t.TempDir(), "nobody-listens"))
	if err := Notify("READY=1"); err == nil {
		t.Error("a socket nobody listens on: no error")
	}
}

// TestMainPIDWaitsForTheManager: MAINPID is sent, then a barrier whose
// descriptor the manager closes; MainPID returns once it did.
func TestMainPIDWaitsForTheManager(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "notify")
	m := listen(t, addr, false)
	t.Setenv(EnvSocket, addr)
	if err := MainPID(4242, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := m.next(t); got != "MAINPID=4242" {
		t.Errorf("first message %q, want MAINPID=4242", got)
	}
	if got := m.next(t); got != "BARRIER=1 +1fd" {
		t.Errorf("second message %q, want BARRIER=1 with one descriptor", got)
	}
	if err := MainPID(0, time.Second); err == nil {
		t.Error("MAINPID=0 accepted")
	}
}

// TestBarrierTimeout: a manager that keeps the descriptor open makes the
// barrier fail after its timeout, with the socket named.
func TestBarrierTimeout(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "notify")
	m := listen(t, addr, true)
	err := Barrier(addr, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not answer the barrier") {
		t.Fatalf("barrier with a manager that holds it: %v", err)
	}
	if got := m.next(t); got != "BARRIER=1 +1fd" {
		t.Errorf("got %q", got)
	}
}
