package keeper

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/procname"
	"github.com/vgpud/vgpud/internal/scmrights"
)

// A released connection is drained until the VMM sends nothing for
// drainQuiet (it stops once it has read the end of file: QEMU's client
// then shuts its socket down and sends no more), or it closes its end,
// or drainMax has passed. Under systemd the restart of vgpud waits for
// the keeper to exit, so these stay short.
const (
	drainQuiet = 250 * time.Millisecond
	drainMax   = 2 * time.Second
)

// Main runs the keeper process and returns its exit code: it keeps what
// it is given on the control socket (fd 3) until the socket ends or a
// SIGTERM or SIGINT, then releases everything, each connection after
// farewell (nil: none; name is what Start asked for, logged when it names
// none this binary knows).
func Main(name string, farewell Farewell) int {
	procname.Set("vgpud-keeper") // it was started as /proc/self/exe
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "connection-keeper", "pid", os.Getpid())
	if name != "" && farewell == nil {
		log.Error("no such farewell: connections end with an end of file alone", "farewell", name)
	}
	// Its parent is the vgpud that started it, read before that vgpud
	// may be gone (its descriptors are its own, not "another process's",
	// while it exits).
	daemon := os.Getppid()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	var signalled atomic.Bool
	go func() {
		s := <-sigs
		signalled.Store(true)
		log.Info("told to stop: releasing", "signal", s.String())
		// The control loop reads an end of file and releases.
		_ = unix.Shutdown(controlFD, unix.SHUT_RD)
	}()
	held, err := serve(controlFD, log)
	if err != nil {
		log.Error("control socket", "err", err.Error())
	}
	// Told to stop, the keeper cannot know its daemon is gone: what the
	// daemon still has open it serves, and is left alone.
	if signalled.Load() {
		daemon = 0
	}
	release(held, daemon, farewell, log)
	return 0
}

// serve applies control messages from fd until it ends, and returns what
// is held then. A bad message is logged and its descriptors closed; it
// does not end the keeper (which would release connections vgpud
// serves).
func serve(fd int, log *slog.Logger) (map[ID]int, error) {
	held := map[ID]int{}
	buf := make([]byte, MsgSize+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return held, err
		}
		fds, perr := scmrights.Parse(oob[:oobn])
		if n == 0 && len(fds) == 0 && perr == nil {
			return held, nil // every daemon's end is closed, or we were told to stop
		}
		m, err := Decode(buf[:n])
		if err == nil && perr != nil {
			err = fmt.Errorf("%w: %v", ErrMsg, perr)
		}
		if err == nil && flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = fmt.Errorf("%w: truncated", ErrMsg)
		}
		if err == nil && (m.Op == OpKeep) != (len(fds) == 1) {
			err = fmt.Errorf("%w: op %d with %d descriptors", ErrMsg, m.Op, len(fds))
		}
		if err == nil && m.Op == OpKeep {
			if _, dup := held[m.ID]; dup {
				err = fmt.Errorf("%w: id %#x kept already", ErrMsg, m.ID)
			}
		}
		if err != nil {
			log.Error("control message refused", "err", err.Error())
			scmrights.Close(fds)
			continue
		}
		switch m.Op {
		case OpKeep:
			held[m.ID] = fds[0]
		case OpDrop:
			if c, ok := held[m.ID]; ok {
				unix.Close(c)
				delete(held, m.ID)
			}
		}
	}
}

// release lets go of every held connection: one another process still
// holds (an upgrade's new vgpud) is closed, any other ends in order,
// after farewell (if any) answered what its VMM waits for.
func release(held map[ID]int, daemon int, farewell Farewell, log *slog.Logger) {
	if len(held) == 0 {
		return
	}
	elsewhere := heldElsewhere(held, daemon)
	var wg sync.WaitGroup
	for id, fd := range held {
		who := []any{"id", fmt.Sprintf("%#x", id), "socket", socketName(fd)}
		if elsewhere[fd] {
			unix.Close(fd)
			log.Info("connection served elsewhere: closed", who...)
			continue
		}
		wg.Go(func() {
			if farewell != nil {
				answered, err := farewell(fd)
				who = append(who, "answered", answered)
				if err != nil {
					who = append(who, "farewell_err", err.Error())
				}
			}
			drained, err := endInOrder(fd)
			attrs := append(who, "drained_bytes", drained)
			if err != nil {
				attrs = append(attrs, "err", err.Error())
			}
			log.Info("connection ended in order", attrs...)
		})
	}
	wg.Wait()
}

// socketName is the path of the socket fd was accepted on (the
// instance's: it names the VM's vGPU), or "".
func socketName(fd int) string {
	if sa, err := unix.Getsockname(fd); err == nil {
		if u, ok := sa.(*unix.SockaddrUnix); ok {
			return u.Name
		}
	}
	return ""
}

// endInOrder shuts fd for writing, so that the VMM reads an end of file,
// reads what it had sent and sends until it falls quiet or closes, and
// closes fd with nothing unread (no reset for the VMM).
func endInOrder(fd int) (int, error) {
	defer unix.Close(fd)
	if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil {
		return 0, fmt.Errorf("shutdown: %w", err)
	}
	buf := make([]byte, 64<<10)
	total := 0
	end := time.Now().Add(drainMax)
	for {
		wait := min(drainQuiet, time.Until(end))
		if wait <= 0 {
			return total, fmt.Errorf("still sending after %v", drainMax)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(wait.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, fmt.Errorf("poll: %w", err)
		}
		if n == 0 {
			return total, nil // quiet
		}
		r, err := unix.Read(fd, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return total, fmt.Errorf("read: %w", err)
		}
		if r == 0 {
			return total, nil // the VMM closed its end
		}
		total += r
	}
}

// heldElsewhere says which of the held descriptors' sockets another
// process serves or will end in order, from /proc/*/fd: a process other
// than this keeper and its daemon (0: none left out) that is not a
// keeper and not exiting, or another keeper with a lower PID. A process whose
// descriptors cannot be read (another user's, without the privilege to
// look) counts as not holding them.
//
// Keepers do not count as serving: the two keepers of an upgrade in
// place both hold a connection until the old vgpud exits, and when that
// vgpud and the new one end at once (the new one dies as the old one's
// probation ends), each keeper found the other holding it and only
// closed it; the last close, with the VMM's bytes unread, reset the
// connection and QEMU 11.1 aborted. Of keepers alone the lowest PID ends
// it, the others close their copies; an exiting process serves nothing.
func heldElsewhere(held map[ID]int, daemon int) map[int]bool {
	byInode := map[string]int{}
	for _, fd := range held {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			byInode[fmt.Sprintf("socket:[%d]", st.Ino)] = fd
		}
	}
	out := map[int]bool{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self || pid == daemon {
			continue
		}
		dir := "/proc/" + p.Name() + "/fd/"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var holds []int
		for _, e := range ents {
			link, err := os.Readlink(dir + e.Name())
			if err != nil {
				continue
			}
			if fd, ok := byInode[link]; ok {
				holds = append(holds, fd)
			}
		}
		if len(holds) == 0 || exiting(pid) || (isKeeper(pid) && pid > self) {
			continue
		}
		for _, fd := range holds {
			out[fd] = true
		}
	}
	return out
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h),
// set as a process begins to exit, before its descriptors are closed.
const pfExiting = 0x4

// exiting says whether process pid is exiting or has exited (a zombie):
// the vgpud of an upgrade whose probation just ended, or one killed at
// the same time, does not serve what it still holds.
func exiting(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid flags ...: comm may
	// hold anything, so fields count from its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	if f[0] == "Z" || f[0] == "X" {
		return true
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// isKeeper says whether process pid is a connection keeper (its command
// line's first argument is Role).
func isKeeper(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) >= 2 && args[1] == Role
}
