package qmp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// MaxMessageSize bounds one QMP message read from QEMU, in bytes. A longer
// one is a protocol error and closes the Monitor.
const MaxMessageSize = 16 << 20

// eventBufferLen bounds the events a Monitor keeps for WaitEvent; when full,
// the oldest is dropped (DroppedEvents counts them).
const eventBufferLen = 256

// longAgo is a deadline in the past: setting it wakes a blocked read or
// write with a timeout error.
var longAgo = time.Unix(1, 0)

// Greeting is what QEMU says first on a QMP connection.
type Greeting struct {
	Version struct {
		QEMU struct {
			Major int `json:"major"`
			Minor int `json:"minor"`
			Micro int `json:"micro"`
		} `json:"qemu"`
		// Package is the distribution's build string.
		Package string `json:"package"`
	} `json:"version"`
	// Capabilities are the capabilities QEMU offers (for QEMU 7.2: "oob").
	// The Monitor enables none of them.
	Capabilities []string `json:"capabilities"`
}

// Event is an asynchronous QMP event: {"event": NAME, "data": {...},
// "timestamp": {"seconds": S, "microseconds": US}}.
type Event struct {
	Name string
	// Data is the event's data member as QEMU sent it; nil if absent.
	Data json.RawMessage
	// Timestamp is when QEMU emitted the event (QEMU's host clock).
	Timestamp time.Time
}

// message is any one message QEMU sends.
type message struct {
	QMP       *Greeting       `json:"QMP"`
	Return    json.RawMessage `json:"return"`
	Error     *Error          `json:"error"`
	ID        json.RawMessage `json:"id"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// command is one command the Monitor sends.
type command struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	ID        uint64          `json:"id"`
}

type reply struct {
	ret json.RawMessage
	err error
}

// A Monitor is a QMP connection to one QEMU. Its methods may be called from
// any number of goroutines. Close it to stop its reader goroutine.
type Monitor struct {
	conn     *net.UnixConn
	greeting Greeting
	nextID   atomic.Uint64
	// wsem holds one token while a command is written; a channel so that
	// waiting for it honours a context.
	wsem chan struct{}
	// done is closed when the reader goroutine has returned.
	done chan struct{}

	mu sync.Mutex
	// err, once set, wraps ErrClosed: the Monitor is closed.
	err     error
	pending map[uint64]chan reply
	// events are buffered events, oldest first, at most eventBufferLen.
	events  []Event
	dropped uint64
	// eventc is closed (and replaced) when an event arrives, and closed
	// for good when the Monitor closes.
	eventc chan struct{}
}

// Dial connects to the QMP socket at path, reads QEMU's greeting and
// negotiates capabilities (qmp_capabilities, none enabled). ctx bounds the
// whole handshake; it does not outlive Dial.
func Dial(ctx context.Context, path string) (*Monitor, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp dial: %w", err)
	}
	m, err := New(ctx, c.(*net.UnixConn))
	if err != nil {
		return nil, err
	}
	return m, nil
}

// New adopts conn, a connected QMP socket (for instance one end of a
// socketpair whose other end QEMU got as -chardev socket,fd=N), and does
// Dial's handshake on it. The Monitor owns conn from then on, also when New
// fails.
func New(ctx context.Context, conn *net.UnixConn) (*Monitor, error) {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 64<<10), MaxMessageSize)
	g, err := readGreeting(ctx, conn, sc)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp handshake: %w", err)
	}
	m := &Monitor{
		conn:     conn,
		greeting: g,
		wsem:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		pending:  make(map[uint64]chan reply),
		eventc:   make(chan struct{}),
	}
	go m.readLoop(sc)
	if err := m.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		m.Close()
		return nil, fmt.Errorf("qmp handshake: %w", err)
	}
	return m, nil
}

// readGreeting reads the first message, which must be QEMU's greeting,
// before the reader goroutine starts.
func readGreeting(ctx context.Context, conn *net.UnixConn, sc *bufio.Scanner) (Greeting, error) {
	if err := ctx.Err(); err != nil {
		return Greeting{}, err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.SetReadDeadline(longAgo)
		close(fired)
	})
	line, err := nextMessage(sc)
	if !stop() {
		<-fired
		return Greeting{}, ctx.Err()
	}
	if err != nil {
		return Greeting{}, err
	}
	var msg message
	if err := json.Unmarshal(line, &msg); err != nil {
		return Greeting{}, fmt.Errorf("%w: malformed greeting: %v", ErrProtocol, err)
	}
	if msg.QMP == nil {
		return Greeting{}, fmt.Errorf("%w: first message is not a QMP greeting: %.200s", ErrProtocol, line)
	}
	return *msg.QMP, nil
}

// nextMessage returns the next non-blank line: QEMU ends each message with
// CRLF and puts no newline inside one (pretty=off). The bytes are valid
// until the next call.
func nextMessage(sc *bufio.Scanner) ([]byte, error) {
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) > 0 {
			return line, nil
		}
	}
	switch err := sc.Err(); {
	case err == nil:
		return nil, io.EOF
	case errors.Is(err, bufio.ErrTooLong):
		return nil, fmt.Errorf("%w: message longer than %d bytes", ErrProtocol, MaxMessageSize)
	default:
		return nil, err
	}
}

// Greeting returns the greeting QEMU sent: its version and capabilities.
func (m *Monitor) Greeting() Greeting { return m.greeting }

// Close closes the connection, fails pending calls with ErrClosed, and
// waits for the reader goroutine. Events already buffered stay available to
// WaitEvent. Close is idempotent and returns nil.
func (m *Monitor) Close() error {
	m.shutdown(nil)
	<-m.done
	return nil
}

// Done is closed when the Monitor has closed, for whatever reason (Err
// says which).
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Err returns nil while the Monitor is open, and then the error wrapping
// ErrClosed that its calls fail with.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// shutdown closes the Monitor once: cause (nil for Close) is wrapped with
// ErrClosed and given to every pending call.
func (m *Monitor) shutdown(cause error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	if cause == nil {
		m.err = ErrClosed
	} else {
		m.err = fmt.Errorf("%w: %w", ErrClosed, cause)
	}
	for id, ch := range m.pending {
		ch <- reply{err: m.err}
		delete(m.pending, id)
	}
	close(m.eventc)
	m.mu.Unlock()
	m.conn.Close()
}

// readLoop is the reader goroutine: it reads messages until the connection
// ends or a message is not QMP, then closes the Monitor.
func (m *Monitor) readLoop(sc *bufio.Scanner) {
	defer close(m.done)
	for {
		line, err := nextMessage(sc)
		if err == nil {
			err = m.dispatch(line)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("connection closed by QEMU: %w", err)
			}
			m.shutdown(err)
			return
		}
	}
}

// dispatch handles one message: an event is buffered, a reply delivered to
// its command; anything else is a protocol error.
func (m *Monitor) dispatch(line []byte) error {
	var msg message
	if err := json.Unmarshal(line, &msg); err != nil {
		return fmt.Errorf("%w: malformed message: %v: %.200q", ErrProtocol, err, line)
	}
	switch {
	case msg.Event != "":
		ev := Event{Name: msg.Event, Data: msg.Data}
		if ts := msg.Timestamp; ts != nil {
			ev.Timestamp = time.Unix(ts.Seconds, ts.Microseconds*1000)
		}
		m.pushEvent(ev)
		return nil
	case msg.Return != nil || msg.Error != nil:
		if msg.ID == nil {
			// Every command we send has an id, so a reply without one
			// (QEMU's answer to input it could not parse) cannot be
			// matched: the stream is no longer in step.
			return fmt.Errorf("%w: reply without an id: %.200s", ErrProtocol, line)
		}
		id, err := strconv.ParseUint(string(msg.ID), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: reply id %.40s is not one of ours", ErrProtocol, msg.ID)
		}
		r := reply{ret: msg.Return}
		if msg.Error != nil {
			r = reply{err: msg.Error}
		}
		m.mu.Lock()
		ch, ok := m.pending[id]
		delete(m.pending, id)
		m.mu.Unlock()
		if ok {
			ch <- r // buffered, and sent to once
		}
		// else: the caller gave up (context); the late reply is discarded.
		return nil
	default:
		return fmt.Errorf("%w: message is neither reply nor event: %.200s", ErrProtocol, line)
	}
}

func (m *Monitor) pushEvent(ev Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) == eventBufferLen {
		copy(m.events, m.events[1:])
		m.events = m.events[:len(m.events)-1]
		m.dropped++
	}
	m.events = append(m.events, ev)
	if m.err != nil {
		// Closed (by Close, racing with this read): eventc is closed for
		// good and waiters look at the buffer anyway.
		return
	}
	close(m.eventc)
	m.eventc = make(chan struct{})
}

// DroppedEvents returns how many events were dropped, oldest first,
// because 256 were buffered and none was taken by WaitEvent.
func (m *Monitor) DroppedEvents() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

// WaitEvent returns the first event named name, buffered or future, that
// match accepts (match nil accepts any), and removes it from the buffer.
// The buffer keeps the last 256 events nobody took, so an event that came
// before the call is found too: take care that an old one does not satisfy
// a new wait. match runs with the Monitor's lock held and must not call the
// Monitor. WaitEvent returns ctx's error when ctx ends first, and an error
// wrapping ErrClosed when the Monitor closed and no buffered event matches.
func (m *Monitor) WaitEvent(ctx context.Context, name string, match func(Event) bool) (Event, error) {
	for {
		m.mu.Lock()
		for i, ev := range m.events {
			if ev.Name == name && (match == nil || match(ev)) {
				m.events = append(m.events[:i], m.events[i+1:]...)
				m.mu.Unlock()
				return ev, nil
			}
		}
		if err := m.err; err != nil {
			m.mu.Unlock()
			return Event{}, fmt.Errorf("qmp wait event %s: %w", name, err)
		}
		ch := m.eventc
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("qmp wait event %s: %w", name, ctx.Err())
		}
	}
}

// Execute runs one QMP command, {"execute": command, "arguments": args},
// and decodes its return value into result (if not nil). args is anything
// encoding/json marshals to an object; nil sends no arguments. A QMP error
// reply is returned as a wrapped *Error. If ctx ends first Execute returns
// ctx's error (wrapped) and the reply, when it comes, is discarded: the
// command may still have run.
func (m *Monitor) Execute(ctx context.Context, command string, args any, result any) error {
	return m.ExecuteFiles(ctx, command, args, nil, result)
}

// ExecuteFiles is Execute sending files along with the command: their
// descriptors travel as SCM_RIGHTS in the same sendmsg as the command's
// bytes, which is how QEMU's getfd and add-fd receive them (no "oob"
// capability needed). The caller keeps its files; QEMU gets duplicates.
func (m *Monitor) ExecuteFiles(ctx context.Context, command string, args any, files []*os.File, result any) error {
	var argsJSON json.RawMessage
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("qmp %s: encode arguments: %w", command, err)
		}
		if !bytes.Equal(b, []byte("null")) {
			argsJSON = b
		}
	}
	ret, err := m.call(ctx, command, argsJSON, files)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	if result != nil {
		if err := json.Unmarshal(ret, result); err != nil {
			return fmt.Errorf("qmp %s: decode return value: %w", command, err)
		}
	}
	return nil
}

// call sends one command and waits for its reply.
func (m *Monitor) call(ctx context.Context, execute string, args json.RawMessage, files []*os.File) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := m.nextID.Add(1)
	b, err := json.Marshal(command{Execute: execute, Arguments: args, ID: id})
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	b = append(b, '\n')

	ch := make(chan reply, 1)
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return nil, m.err
	}
	m.pending[id] = ch
	m.mu.Unlock()

	if err := m.write(ctx, b, files); err != nil {
		m.forget(id)
		return nil, err
	}
	select {
	case r := <-ch:
		return r.ret, r.err
	case <-ctx.Done():
		m.forget(id)
		select {
		case r := <-ch: // the reply beat the cancellation
			return r.ret, r.err
		default:
		}
		return nil, ctx.Err()
	}
}

func (m *Monitor) forget(id uint64) {
	m.mu.Lock()
	delete(m.pending, id)
	m.mu.Unlock()
}

// write writes one command, with files' descriptors as SCM_RIGHTS on its
// first byte, while holding wsem. It honours ctx while waiting for wsem and
// while blocked in the write; a write cut short after some bytes went out
// leaves the stream unusable and closes the Monitor.
func (m *Monitor) write(ctx context.Context, b []byte, files []*os.File) error {
	var oob []byte
	if len(files) > 0 {
		fds, err := dupFiles(files)
		if err != nil {
			return err
		}
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
		oob = unix.UnixRights(fds...)
	}

	select {
	case m.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-m.wsem }()
	if err := m.Err(); err != nil {
		return err
	}

	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		m.conn.SetWriteDeadline(longAgo)
		close(fired)
	})
	n, err := m.writeAll(b, oob)
	if !stop() {
		<-fired
		m.conn.SetWriteDeadline(time.Time{})
		if err != nil && n == 0 {
			return ctx.Err()
		}
	}
	if err != nil {
		// Only ctx sets a deadline, so this is the socket failing (or cut
		// short mid-command): either way the stream is unusable.
		m.shutdown(fmt.Errorf("write after %d of %d bytes: %w", n, len(b), err))
		return m.Err()
	}
	return nil
}

// writeAll writes b, oob going with the first sendmsg, and returns how many
// bytes of b went out.
func (m *Monitor) writeAll(b, oob []byte) (int, error) {
	if oob == nil {
		return m.conn.Write(b)
	}
	n, _, err := m.conn.WriteMsgUnix(b, oob, nil)
	if err != nil || n == len(b) {
		return n, err
	}
	k, err := m.conn.Write(b[n:])
	return n + k, err
}

// dupFiles duplicates files' descriptors (close-on-exec) without touching
// their blocking mode, as (*os.File).Fd would; the duplicates stay valid
// even if the caller closes a file while the command is being sent.
func dupFiles(files []*os.File) ([]int, error) {
	fds := make([]int, 0, len(files))
	fail := func(err error) ([]int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	for i, f := range files {
		if f == nil {
			return fail(fmt.Errorf("file %d is nil", i))
		}
		sc, err := f.SyscallConn()
		if err != nil {
			return fail(fmt.Errorf("file %s: %w", f.Name(), err))
		}
		var dup int
		var dupErr error
		if err := sc.Control(func(fd uintptr) {
			dup, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		}); err != nil {
			return fail(fmt.Errorf("file %s: %w", f.Name(), err))
		}
		if dupErr != nil {
			return fail(fmt.Errorf("dup %s: %w", f.Name(), dupErr))
		}
		fds = append(fds, dup)
	}
	return fds, nil
}
