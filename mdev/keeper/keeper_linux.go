package keeper

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Role is the first argument that makes vgpud's binary (or a test binary
// whose TestMain calls EnterRole) the keeper.
const Role = "vgpud-connection-keeper"

// controlFD is the keeper's end of the control socket.
const controlFD = 3

// closeWait bounds Close's wait for the keeper to release and exit: its
// releases run at once and each ends within drainMax.
const closeWait = 10 * time.Second

// A Farewell has the last word on a connection the keeper releases,
// before the end of file: it answers what the VMM is waiting for on fd
// (the requests vgpud never read, which nobody else will answer now),
// and returns how many it answered. The keeper then shuts fd for writing
// and drains it as for any connection. vfio-user's
// (vfiouser.RefuseWaiting) keeps QEMU from waiting out its reply timeout
// with its big lock held (docs/keeper.md "Farewells").
type Farewell func(fd int) (answered int, err error)

// EnterRole runs this process as the keeper, and exits, if its command
// line says so; otherwise it returns. vgpud's main calls it first thing,
// as do the TestMains of packages that start a keeper. farewells are the
// farewells Start may name, by name.
func EnterRole(farewells map[string]Farewell) {
	if len(os.Args) >= 2 && os.Args[1] == Role {
		name := ""
		if len(os.Args) >= 3 {
			name = os.Args[2]
		}
		os.Exit(Main(name, farewells[name]))
	}
}

// Keeper is vgpud's side of a keeper process. Its methods may be called
// on a nil *Keeper, which keeps nothing.
//
// A keeper process that ends while vgpud runs (killed by hand, a crash)
// is started again and handed every connection kept then; the VMs lose
// the orderly end only in between.
type Keeper struct {
	farewell string // the farewell the keeper process is started with ("": none)
	prefix   uint64
	next     atomic.Uint64
	log      *slog.Logger
	stop     chan struct{} // closed by Close (under mu): no more restarts, no more Keeps
	ended    chan struct{} // closed when the supervisor has reaped the last process

	mu     sync.Mutex
	ctl    int // our end of the current process's control socket; -1 when none
	pid    int
	kept   map[ID]syscall.Conn // what a restarted process must be handed
	failed bool                // a send failed since the last start (logged once)
}

// restartDelay paces the starts of a keeper that keeps ending.
const restartDelay = time.Second

// Start starts a keeper process: this program again, with Role as its
// first argument and farewell (the name of one of the Farewells its
// EnterRole knows; "": none) as its second. It is not killed with its
// parent: outliving vgpud is its purpose.
func Start(log *slog.Logger, farewell string) (*Keeper, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keeper{farewell: farewell, prefix: uint64(os.Getpid()) << 32, log: log, stop: make(chan struct{}), ended: make(chan struct{}), ctl: -1, kept: map[ID]syscall.Conn{}}
	cmd, err := k.spawn()
	if err != nil {
		return nil, err
	}
	go k.supervise(cmd)
	return k, nil
}

// spawn starts a keeper process and makes it the current one.
func (k *Keeper) spawn() (*exec.Cmd, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("connection keeper: control socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "keeper-control")
	cmd := exec.Command("/proc/self/exe", Role, k.farewell)
	cmd.Args[0] = os.Args[0]
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = os.Stderr
	// A process group of its own: a terminal's Ctrl-C is for vgpud, whose
	// end the keeper learns from its control socket.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("connection keeper: start: %w", err)
	}
	k.mu.Lock()
	k.pid, k.failed = cmd.Process.Pid, false
	if k.closingLocked() {
		// Close ran while this one started: it ends at once, keeping
		// nothing, and the supervisor reaps it.
		unix.Close(fds[0])
	} else {
		k.ctl = fds[0]
	}
	k.mu.Unlock()
	k.log.Info("connection keeper started", "pid", cmd.Process.Pid)
	return cmd, nil
}

// supervise reaps each keeper process and, unless Close ended it, starts
// another and hands it what is kept.
func (k *Keeper) supervise(cmd *exec.Cmd) {
	defer close(k.ended)
	for {
		err := cmd.Wait()
		k.mu.Lock()
		if k.ctl >= 0 {
			unix.Close(k.ctl)
			k.ctl = -1
		}
		closing := k.closingLocked()
		k.mu.Unlock()
		if closing {
			return
		}
		k.log.Error("connection keeper ended while vgpud runs: starting another", "pid", cmd.Process.Pid, "err", fmt.Sprint(err))
		for {
			select {
			case <-k.stop:
				return
			case <-time.After(restartDelay):
			}
			if cmd, err = k.spawn(); err == nil {
				break
			}
			k.log.Error("connection keeper", "err", err.Error())
		}
		k.mu.Lock()
		for id, c := range k.kept {
			if k.closingLocked() {
				break
			}
			k.sendKeepLocked(id, c)
		}
		k.mu.Unlock()
	}
}

// PID is the current keeper process's (0 between a process's end and
// the next's start).
func (k *Keeper) PID() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctl < 0 {
		return 0
	}
	return k.pid
}

// Keep hands the keeper a duplicate of c's descriptor and returns the ID
// to drop it by. On a nil Keeper it returns 0 and keeps nothing. If the
// keeper cannot be told (logged), the connection works as before, only
// without the orderly end until a restarted keeper is handed it.
func (k *Keeper) Keep(c syscall.Conn) ID {
	if k == nil {
		return 0
	}
	id := ID(k.prefix | k.next.Add(1)&0xFFFFFFFF)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closingLocked() {
		return 0
	}
	k.kept[id] = c
	k.sendKeepLocked(id, c)
	return id
}

func (k *Keeper) sendKeepLocked(id ID, c syscall.Conn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return // not a connection with a descriptor: nothing to keep
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = k.sendLocked(Msg{Op: OpKeep, ID: id}, unix.UnixRights(int(fd)))
	}); err != nil {
		return // closed already: its session has ended, its Drop is coming
	}
	if serr != nil {
		k.sendFailedLocked(serr)
	}
}

// Drop tells the keeper to close what it keeps under id (0: nothing).
// Call it when the connection's session has ended.
func (k *Keeper) Drop(id ID) {
	if k == nil || id == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.kept, id)
	if err := k.sendLocked(Msg{Op: OpDrop, ID: id}, nil); err != nil {
		k.sendFailedLocked(err)
	}
}

// closingLocked says whether Close has begun.
func (k *Keeper) closingLocked() bool {
	select {
	case <-k.stop:
		return true
	default:
		return false
	}
}

func (k *Keeper) sendLocked(m Msg, oob []byte) error {
	if k.ctl < 0 {
		return errors.New("no keeper process")
	}
	return unix.Sendmsg(k.ctl, m.Encode(), oob, nil, unix.MSG_NOSIGNAL)
}

func (k *Keeper) sendFailedLocked(err error) {
	if !k.failed {
		k.failed = true
		k.log.Error("connection keeper unreachable: VM connections end in order again once it is restarted", "pid", k.pid, "err", err.Error())
	}
}

// Close ends this daemon's hold on the keeper: the process, once no
// process holds its control socket, releases what it keeps and exits.
// Close waits for that (bounded; then it kills it).
func (k *Keeper) Close() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	if k.closingLocked() {
		k.mu.Unlock()
		<-k.ended
		return nil
	}
	close(k.stop)
	if k.ctl >= 0 {
		unix.Close(k.ctl)
		k.ctl = -1
	}
	k.mu.Unlock()
	select {
	case <-k.ended:
		return nil
	case <-time.After(closeWait):
		k.mu.Lock()
		pid := k.pid
		k.mu.Unlock()
		_ = unix.Kill(pid, unix.SIGKILL)
		<-k.ended
		return fmt.Errorf("connection keeper %d did not end within %v: killed", pid, closeWait)
	}
}
