package keeper

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/sockpairtest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

func TestMain(m *testing.M) {
	EnterRole(map[string]Farewell{"test": testFarewell, "vfio-user": vfiouser.RefuseWaiting})
	goleak.VerifyTestMain(m)
}

// pair is a connected stream socket pair: vm plays QEMU's end, daemon
// vgpud's.
func pair(t *testing.T) (vm, daemon *net.UnixConn) { return sockpairtest.Stream(t) }

// testFarewell answers what is waiting with "answered N" (N: the bytes
// it read), as a protocol's farewell answers the requests waiting.
func testFarewell(fd int) (int, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return 0, err
	}
	_, err = unix.Write(fd, fmt.Appendf(nil, "answered %d", n))
	return 1, err
}

func start(t *testing.T) *Keeper { return startWith(t, "") }

// startWith starts a keeper whose process has the farewell named (one
// TestMain's EnterRole knows, or not).
func startWith(t *testing.T, farewell string) *Keeper {
	t.Helper()
	k, err := Start(slog.New(slog.DiscardHandler), farewell)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// readEnd reads vm until its end, as QEMU's client does, and returns the
// error that ended it (io.EOF for an orderly end). failAfter only bounds
// a broken test.
func readEnd(t *testing.T, vm *net.UnixConn) error {
	t.Helper()
	vm.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 4096)
	for {
		if _, err := vm.Read(buf); err != nil {
			return err
		}
	}
}

// wantEnd fails t unless vm's reads end with an end of file (when says
// at what point).
func wantEnd(t *testing.T, vm *net.UnixConn, when string) {
	t.Helper()
	if err := readEnd(t, vm); !errors.Is(err, io.EOF) {
		t.Fatalf("%s the VM read %v, want an end of file", when, err)
	}
}

// waitHeld waits until the keeper process has c's socket open.
func waitHeld(t *testing.T, k *Keeper, c *net.UnixConn) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	raw.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) })
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("socket:[%d]", st.Ino)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		dir := fmt.Sprintf("/proc/%d/fd/", k.PID())
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if l, _ := os.Readlink(dir + e.Name()); l == want {
				return
			}
		}
	}
	t.Fatalf("the keeper never held %s", want)
}

// The kernel behaviour the keeper exists for: a daemon's socket closed
// with bytes unread gives the VM a reset, not an end of file.
func TestUnreadBytesResetWithoutKeeper(t *testing.T) {
	vm, daemon := pair(t)
	if _, err := vm.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	daemon.Close()
	if err := readEnd(t, vm); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("VM read %v, want ECONNRESET", err)
	}
}

// The daemon dies (its copy and the control socket close) with the VM's
// bytes unread while the VM goes on writing until it reads its end of
// file: the VM reads an end of file, never a reset, then and after the
// keeper has gone.
func TestDaemonDeathEndsInOrder(t *testing.T) {
	vm, daemon := pair(t)
	k := start(t)
	if id := k.Keep(daemon); id == 0 {
		t.Fatal("Keep returned 0")
	}
	if _, err := vm.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	wrote := make(chan struct{})
	go func() { // the VM's register writes, until it has read the end
		defer close(wrote)
		for !stop.Load() {
			if _, err := vm.Write(make([]byte, 512)); err != nil {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	ended := make(chan error, 1)
	go func() { // the VM's reader, as QEMU's IO thread
		err := readEnd(t, vm)
		stop.Store(true) // QEMU sends nothing once it has read the end
		ended <- err
	}()
	daemon.Close()
	if err := k.Close(); err != nil { // the last hold on the control socket
		t.Fatal(err)
	}
	err := <-ended
	<-wrote
	if !errors.Is(err, io.EOF) {
		t.Fatalf("VM read %v, want an end of file", err)
	}
	wantEnd(t, vm, "after the keeper ended")
}

// With a farewell, the VM reads its answer to what it sent after the
// daemon died, then the end of file; a name the keeper does not know
// ends the connection as without one.
func TestFarewellAnswersBeforeTheEnd(t *testing.T) {
	for _, tc := range []struct{ farewell, want string }{
		{"test", "answered 7"},
		{"no-such-farewell", ""},
	} {
		t.Run(tc.farewell, func(t *testing.T) {
			vm, daemon := pair(t)
			k := startWith(t, tc.farewell)
			k.Keep(daemon)
			waitHeld(t, k, daemon)
			daemon.Close()
			if _, err := vm.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			if err := k.Close(); err != nil {
				t.Fatal(err)
			}
			vm.SetReadDeadline(time.Now().Add(time.Minute))
			got, err := io.ReadAll(vm)
			if err != nil {
				t.Fatalf("VM read %q, then %v; want an end of file", got, err)
			}
			if string(got) != tc.want {
				t.Fatalf("VM read %q before the end of file, want %q", got, tc.want)
			}
		})
	}
}

// vfio-user's farewell, in the keeper process, as QEMU meets it after
// vgpud died: the BAR read it sent (which the dead vgpud never read) is
// answered with an error, its next write fails at once, and it reads the
// end of file: no request is left waiting for QEMU's 5 s timeout.
func TestVFIOUserFarewell(t *testing.T) {
	vm, daemon := pair(t)
	k := startWith(t, "vfio-user")
	k.Keep(daemon)
	waitHeld(t, k, daemon)
	daemon.Close()
	req := make([]byte, vfiouser.HeaderSize+16)
	vfiouser.Header{ID: 7, Cmd: vfiouser.CmdRegionRead, Size: uint32(len(req))}.Put(req)
	if _, err := vm.Write(req); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Write(req); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("the VM's request after the keeper's farewell: %v, want EPIPE", err)
	}
	vm.SetReadDeadline(time.Now().Add(time.Minute))
	got, err := io.ReadAll(vm)
	if err != nil {
		t.Fatalf("VM read %x, then %v; want an end of file", got, err)
	}
	want := vfiouser.Header{ID: 7, Cmd: vfiouser.CmdRegionRead, Size: vfiouser.HeaderSize, Flags: vfiouser.TypeReply | vfiouser.FlagError, Error: uint32(vfiouser.FarewellErrno)}
	if len(got) != vfiouser.HeaderSize || vfiouser.ParseHeader(got) != want {
		t.Fatalf("VM read %x before the end of file, want the error reply %+v", got, want)
	}
}

// The two keepers of an upgrade in place hold the same connection; when
// both their vgpuds end at once (the new one killed as the old one's
// probation ends), one ends it in order: the VM reads an end of file,
// never a reset (each keeper used to see the other holding it and only
// close it, and QEMU 11.1 aborted on the reset).
func TestTwoKeepersReleasingAtOnce(t *testing.T) {
	for range 5 {
		vm, daemon := pair(t)
		old, upgraded := start(t), start(t)
		old.Keep(daemon)
		upgraded.Keep(daemon)
		waitHeld(t, old, daemon)
		waitHeld(t, upgraded, daemon)
		if _, err := vm.Write(make([]byte, 64<<10)); err != nil { // unread
			t.Fatal(err)
		}
		daemon.Close()
		errs := make(chan error, 2)
		for _, k := range []*Keeper{old, upgraded} {
			go func() { errs <- k.Close() }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		wantEnd(t, vm, "both keepers released at once:")
	}
}

// A connection another process still holds (the new vgpud of an upgrade
// in place) is closed, not ended: the VM reads nothing until that process
// lets go too.
func TestConnectionServedElsewhereIsOnlyClosed(t *testing.T) {
	vm, daemon := pair(t)
	f, err := daemon.File()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "60")
	holder.ExtraFiles = []*os.File{f}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	k := start(t)
	k.Keep(daemon)
	daemon.Close()
	if err := k.Close(); err != nil { // returns once the keeper has released and exited
		t.Fatal(err)
	}
	vm.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := vm.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("VM read %d, %v with its connection still served: want nothing to read", n, err)
	}
	holder.Process.Kill()
	holder.Wait()
	wantEnd(t, vm, "once nobody served it")
}

// Drop lets a connection go while the keeper runs: the daemon's own
// close is then the VM's end of file.
func TestDropLetsGo(t *testing.T) {
	vm, daemon := pair(t)
	k := start(t)
	id := k.Keep(daemon)
	waitHeld(t, k, daemon) // it has named itself before it serves
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", k.PID())); err != nil || string(comm) != "vgpud-keeper\n" {
		t.Errorf("the keeper's process name: %q, %v; want vgpud-keeper (pgrep -x, ps)", comm, err)
	}
	k.Drop(id)
	daemon.Close()
	wantEnd(t, vm, "at the end")
	var nilKeeper *Keeper
	if id := nilKeeper.Keep(daemon); id != 0 {
		t.Fatalf("a nil keeper kept %#x", id)
	}
	nilKeeper.Drop(1)
	if err := nilKeeper.Close(); err != nil {
		t.Fatal(err)
	}
}

// SIGTERM (systemd stopping the unit's processes) releases at once.
func TestSignalReleases(t *testing.T) {
	vm, daemon := pair(t)
	k := start(t)
	k.Keep(daemon)
	waitHeld(t, k, daemon) // its signal handler is in place before it serves
	if _, err := vm.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	daemon.Close()
	if err := unix.Kill(k.PID(), unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, vm, "at the end")
}

// A keeper that ends while its daemon runs (here a SIGTERM to it alone)
// leaves the connections the daemon still serves alone, and is started
// again with them: the daemon's later death still ends them in order.
func TestKeeperEndedWhileDaemonRunsIsRestarted(t *testing.T) {
	vm, daemon := pair(t)
	k := start(t)
	k.Keep(daemon)
	waitHeld(t, k, daemon)
	first := k.PID()
	if err := unix.Kill(first, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); k.PID() == first || k.PID() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the keeper was not started again")
		}
	}
	waitHeld(t, k, daemon)
	vm.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := vm.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("VM read %d, %v while its daemon serves it: want nothing to read", n, err)
	}
	if _, err := vm.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	daemon.Close()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, vm, "at the end")
}

// Malformed control messages are refused one by one: the keeper keeps
// what it held and goes on.
func TestBadControlMessagesAreRefused(t *testing.T) {
	vm, daemon := pair(t)
	_, other := pair(t)
	k := start(t)
	k.Keep(daemon)
	of, err := other.File()
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	rights := unix.UnixRights(int(of.Fd()))
	bad := []struct {
		msg, oob []byte
	}{
		{[]byte{1, 2, 3}, nil},
		{Msg{Op: 9, ID: 5}.Encode(), nil},
		{Msg{Op: OpKeep, ID: 0}.Encode(), rights},
		{Msg{Op: OpKeep, ID: 7}.Encode(), nil},
		{Msg{Op: OpDrop, ID: 7}.Encode(), rights},
		{append(Msg{Op: OpDrop, ID: 7}.Encode(), 0), nil},
	}
	for _, b := range bad {
		k.mu.Lock()
		err := unix.Sendmsg(k.ctl, b.msg, b.oob, nil, unix.MSG_NOSIGNAL)
		k.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	daemon.Close()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, vm, "at the end")
}
