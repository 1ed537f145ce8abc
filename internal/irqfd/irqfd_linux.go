package irqfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrNotEventfd is wrapped when a peer's interrupt fd is not an eventfd.
var ErrNotEventfd = errors.New("not an eventfd")

// eventfdLink is what /proc/self/fd/N reads for an eventfd.
const eventfdLink = "anon_inode:[eventfd]"

// Check returns nil if fd is an eventfd, an error wrapping ErrNotEventfd
// that says what it is otherwise.
func Check(fd int) error {
	if fd < 0 {
		return fmt.Errorf("fd %d: %w", fd, ErrNotEventfd)
	}
	buf := make([]byte, 128)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return fmt.Errorf("fd %d: readlink: %v: %w", fd, err, ErrNotEventfd)
	}
	if what := string(buf[:n]); what != eventfdLink {
		return fmt.Errorf("fd %d is %q: %w", fd, what, ErrNotEventfd)
	}
	return nil
}

// Prepare checks that fd is an eventfd and makes it non-blocking. The
// flag is the open file's, shared with the peer: QEMU makes its event
// notifiers non-blocking itself, so nothing changes for it; a peer that
// clears the flag again only makes the next Trigger write set it again.
func Prepare(fd int) error {
	if err := Check(fd); err != nil {
		return err
	}
	return nonblock(fd)
}

func nonblock(fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("fd %d: F_GETFL: %w", fd, err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("fd %d: F_SETFL O_NONBLOCK: %w", fd, err)
	}
	return nil
}

// Trigger signals one interrupt eventfd it owns. Signal never blocks;
// a goroutine adds the signals to the eventfd's counter. A write that
// would overflow the counter is dropped (the counter is full: the
// interrupt is pending anyway).
type Trigger struct {
	fd  int
	log *slog.Logger

	pending atomic.Uint64 // signals not yet written
	kick    chan struct{} // wakes the writer; capacity 1
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	closed  bool   // Close was called
	writing bool   // the goroutine is in write(2)
	drained uint64 // counts Close and Unblock read, written back at the end

	written, dropped, failed atomic.Uint64
}

// New returns a Trigger that owns fd, after Prepare. On error fd is
// closed. log may be nil (slog.Default()).
func New(fd int, log *slog.Logger) (*Trigger, error) {
	if err := Prepare(fd); err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	t := &Trigger{fd: fd, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go t.loop()
	return t, nil
}

// FD returns the eventfd, still the Trigger's, valid until Close.
func (t *Trigger) FD() int { return t.fd }

// Signal adds 1 to the eventfd's counter, later, in the Trigger's
// goroutine. It never blocks and may be called holding any lock.
func (t *Trigger) Signal() {
	t.pending.Add(1)
	select {
	case t.kick <- struct{}{}:
	default: // the writer is already woken
	}
}

// Stats returns how many signals were written, dropped on a full counter
// and lost to a failed write.
func (t *Trigger) Stats() (written, dropped, failed uint64) {
	return t.written.Load(), t.dropped.Load(), t.failed.Load()
}

// Close stops the Trigger: signals not yet written are dropped and the
// goroutine closes the eventfd when it ends. Close waits for that unless
// the goroutine is inside a write (Done says when it ended): a write
// never blocks unless the peer races it (Trigger.write), and then Close
// must not. A write blocked on a full counter goes on once the counter
// is read, so Close reads it once (without blocking) to let the
// goroutine end; a peer that fills the counter again before the writer
// retries keeps it blocked until the next read (Unblock). What those
// reads took is added back to the counter when the goroutine ends, so a
// pending interrupt stays pending even where the write was not blocked
// after all (it had just returned). Close is idempotent; a nil Trigger's
// Close does nothing.
func (t *Trigger) Close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	writing := t.writing
	if writing {
		t.unblockLocked()
	}
	t.mu.Unlock()
	close(t.stop)
	if !writing {
		<-t.done
	}
}

// Unblock reads the counter (without blocking) if the goroutine is
// inside a write, which a write blocked on a full counter needs to go
// on; the count read is added back when the goroutine ends (the
// eventfd's owner uses Unblock only after Close). It does nothing once
// the goroutine ended. A nil Trigger's Unblock does nothing.
func (t *Trigger) Unblock() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.writing {
		t.unblockLocked()
	}
}

// unblockLocked reads the counter; t.mu is held and the goroutine is in
// a write, so the fd is open (the goroutine closes it only after it
// cleared writing under t.mu).
func (t *Trigger) unblockLocked() {
	v, err := Drain(t.fd)
	if err != nil {
		t.log.Error("irqfd: read a full eventfd to unblock its writer", "err", err)
	}
	t.drained = min(t.drained+v, CounterMax) // no wrap: the counter holds at most CounterMax
}

// CounterMax is the largest value an eventfd's counter holds.
const CounterMax = 0xfffffffffffffffe

// restore writes back what Close and Unblock read from the counter, so
// that reading it to unblock the writer does not lose a pending
// interrupt. A counter the writer's own write refilled meanwhile makes
// the write back fail with EAGAIN: the interrupt is pending anyway.
func (t *Trigger) restore() {
	t.mu.Lock()
	v := t.drained
	t.drained = 0
	t.mu.Unlock()
	if v == 0 {
		return
	}
	if err := nonblock(t.fd); err != nil {
		return
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	unix.Write(t.fd, b[:]) // EAGAIN: the counter is not empty, the interrupt still pending
}

// Discard drops the signals not yet written. One being written may
// still reach the counter.
func (t *Trigger) Discard() {
	if t != nil {
		t.pending.Store(0)
	}
}

// Done is closed when the goroutine has ended and closed the eventfd.
func (t *Trigger) Done() <-chan struct{} { return t.done }

func (t *Trigger) loop() {
	defer close(t.done)
	defer unix.Close(t.fd)
	defer t.restore()
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		t.writing = true
		t.mu.Unlock()
		if n := t.pending.Swap(0); n > 0 {
			t.write(n)
		}
		t.mu.Lock()
		t.writing = false
		t.mu.Unlock()
	}
}

// write adds n to the counter without blocking: the peer shares the open
// file and may have cleared O_NONBLOCK, so it is set again first. Only a
// peer that clears it again between the two calls, with the counter full,
// can make the write wait, and then only this goroutine waits, holding
// no lock; it goes on when anyone reads the counter.
func (t *Trigger) write(n uint64) {
	if err := nonblock(t.fd); err != nil {
		t.failed.Add(n)
		t.log.Error("irqfd: interrupt not delivered", "err", err)
		return
	}
	if beforeWrite != nil {
		beforeWrite(t.fd)
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], n)
	_, err := unix.Write(t.fd, b[:])
	switch {
	case err == nil:
		t.written.Add(n)
	case errors.Is(err, unix.EAGAIN):
		t.dropped.Add(n)
	default:
		t.failed.Add(n)
		t.log.Error("irqfd: interrupt not delivered", "err", err)
	}
}

// beforeWrite, set by tests only, runs between the write's F_SETFL and
// the write: where a racing peer clears O_NONBLOCK again.
var beforeWrite func(fd int)

// Drain reads and so resets an eventfd's counter without blocking, even
// when the peer that shares the open file cleared its O_NONBLOCK: the
// read is a preadv2 with RWF_NOWAIT, which an eventfd honours (Linux 5.12
// and later). On an older kernel the open file is made non-blocking
// first, then read: only a peer that clears the flag again and empties
// the counter between the two calls can make that read wait. Drain
// returns the counter, 0 with a nil error if it was 0.
func Drain(fd int) (uint64, error) {
	var b [8]byte
	_, err := unix.Preadv2(fd, [][]byte{b[:]}, -1, unix.RWF_NOWAIT)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		if err := nonblock(fd); err != nil {
			return 0, err
		}
		_, err = unix.Read(fd, b[:])
	}
	if err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return 0, nil
		}
		return 0, fmt.Errorf("read eventfd %d: %w", fd, err)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}
