package mdev

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestReattachAfterHangUp: a VM connecting right after the previous one
// hung up is served, however late vgpud notices the hang-up; a second VM
// while the first is alive is refused.
func TestReattachAfterHangUp(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	for i := 0; i < 5; i++ {
		vm := attach(t, inst)
		openDriver(t, vm).Close()
		vm.Close() // hang up and reconnect at once
	}
	vm := attach(t, inst)
	if got := vm.Read32(0); got == 0xffffffff {
		t.Fatalf("register read through the last VM failed: %v", vm.Err())
	}

	old := attachGrace
	attachGrace = 50 * time.Millisecond
	t.Cleanup(func() { attachGrace = old })
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The second VM's first message gets no answer: vgpud hangs up.
	if _, err := c.Write(make([]byte, 16)); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("write: %v", err)
	}
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Errorf("second VM got %d bytes while the first is attached, want a hang-up", n)
	}
}
