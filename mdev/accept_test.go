package mdev

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

// TestAcceptSurvivesEMFILE: with the process out of file descriptors an
// instance socket's accept fails (EMFILE); the socket keeps accepting once
// descriptors are free again, and the failure is counted.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(len(fds)) + 8
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fillers []*os.File
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
			for _, f := range fillers {
				f.Close()
			}
		}
	}
	defer restore()
	// Use up every descriptor, then free one: the client's end takes it
	// and the server's accept finds none.
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fillers = append(fillers, f)
	}
	if len(fillers) == 0 {
		restore()
		t.Fatal("no descriptor left to use up")
	}
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		restore()
		t.Fatalf("dial with one descriptor left: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); m.AcceptRetries() == 0; {
		if time.Now().After(deadline) {
			restore()
			t.Fatal("no accept failed with the descriptors used up")
		}
		time.Sleep(time.Millisecond)
	}
	restore()
	c.SetDeadline(time.Now().Add(time.Minute)) // a socket that stopped accepting fails, not hangs
	vm, err := mpqemutest.NewVM(c, 64<<20)
	if err != nil {
		t.Fatalf("the socket stopped accepting after EMFILE: %v", err)
	}
	defer vm.Close()
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		t.Fatalf("driver over the connection accepted after EMFILE: %v", err)
	}
	d.Close()
	t.Logf("accept retries: %d", m.AcceptRetries())
}
