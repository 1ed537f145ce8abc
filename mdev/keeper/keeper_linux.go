package keeper

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Role is the first argument that makes vgpud's binary (or a test binary
// whose TestMain calls EnterRole) the keeper.
const Role = "vgpud-connection-keeper"

// envDaemon carries the PID of the vgpud that started the keeper: its
// descriptors are not "another process's" when the keeper releases (it
// may be exiting as the keeper looks).
const envDaemon = "VGPUD_KEEPER_DAEMON"

// controlFD is the keeper's end of the control socket.
const controlFD = 3

// closeWait bounds Close's wait for the keeper to release and exit: its
// releases run at once and each ends within drainMax.
const closeWait = 10 * time.Second

// EnterRole runs this process as the keeper, and exits, if its command
// line says so; otherwise it returns. vgpud's main calls it first thing,
// as do the TestMains of packages that start a keeper.
func EnterRole() {
	if len(os.Args) >= 2 && os.Args[1] == Role {
		os.Exit(Main())
	}
}

// Keeper is vgpud's side of a keeper process. Its methods may be called
// on a nil *Keeper, which keeps nothing.
type Keeper struct {
	ctl    int // our end of the control socket; -1 once closed
	mu     sync.Mutex
	prefix uint64
	next   atomic.Uint64
	pid    int
	done   chan struct{} // closed when the process has been reaped
	failed atomic.Bool   // a send failed once (logged once)
	log    *slog.Logger
}

// Start starts a keeper process: this program again, with Role as its
// first argument. It is not killed with its parent: outliving vgpud is
// its purpose.
func Start(log *slog.Logger) (*Keeper, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("connection keeper: control socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "keeper-control")
	cmd := exec.Command("/proc/self/exe", Role)
	cmd.Args[0] = os.Args[0]
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), envDaemon+"="+strconv.Itoa(os.Getpid()))
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("connection keeper: start: %w", err)
	}
	k := &Keeper{ctl: fds[0], prefix: uint64(os.Getpid()) << 32, pid: cmd.Process.Pid, done: make(chan struct{}), log: log}
	go func() {
		defer close(k.done)
		if err := cmd.Wait(); err != nil {
			log.Warn("connection keeper ended", "pid", k.pid, "err", err.Error())
		}
	}()
	log.Info("connection keeper started", "pid", k.pid)
	return k, nil
}

// PID is the keeper process's.
func (k *Keeper) PID() int { return k.pid }

// Keep hands the keeper a duplicate of c's descriptor and returns the ID
// to drop it by. On a nil Keeper, or if the keeper is gone (logged once),
// it returns 0 and keeps nothing: the connection works as before, only
// without the orderly end.
func (k *Keeper) Keep(c syscall.Conn) ID {
	if k == nil {
		return 0
	}
	raw, err := c.SyscallConn()
	if err != nil {
		k.sendFailed(err)
		return 0
	}
	id := ID(k.prefix | k.next.Add(1)&0xFFFFFFFF)
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = k.send(Msg{Op: OpKeep, ID: id}, unix.UnixRights(int(fd)))
	}); err != nil {
		serr = err
	}
	if serr != nil {
		k.sendFailed(serr)
		return 0
	}
	return id
}

// Drop tells the keeper to close what it keeps under id (0: nothing).
// Call it when the connection's session has ended.
func (k *Keeper) Drop(id ID) {
	if k == nil || id == 0 {
		return
	}
	if err := k.send(Msg{Op: OpDrop, ID: id}, nil); err != nil {
		k.sendFailed(err)
	}
}

func (k *Keeper) send(m Msg, oob []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctl < 0 {
		return errors.New("closed")
	}
	return unix.Sendmsg(k.ctl, m.Encode(), oob, nil, unix.MSG_NOSIGNAL)
}

func (k *Keeper) sendFailed(err error) {
	if k.failed.CompareAndSwap(false, true) {
		k.log.Error("connection keeper unreachable: VM connections no longer end in order if vgpud dies", "pid", k.pid, "err", err.Error())
	}
}

// Close ends this daemon's hold on the keeper: once no process holds its
// control socket, it releases what it keeps and exits. Close waits for
// that (bounded; then it kills it) when this process is its parent.
func (k *Keeper) Close() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	if k.ctl >= 0 {
		unix.Close(k.ctl)
		k.ctl = -1
	}
	k.mu.Unlock()
	select {
	case <-k.done:
		return nil
	case <-time.After(closeWait):
		_ = unix.Kill(k.pid, unix.SIGKILL)
		<-k.done
		return fmt.Errorf("connection keeper %d did not end within %v: killed", k.pid, closeWait)
	}
}
