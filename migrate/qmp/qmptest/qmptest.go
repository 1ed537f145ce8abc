// Package qmptest is a fake QMP server for tests of code that drives QEMU
// through package qmp: it listens on a Unix socket, greets each client as
// QEMU 7.2 does, answers qmp_capabilities, dispatches other commands to
// handlers the test registers, records every command it receives (with the
// descriptors sent along as SCM_RIGHTS), emits events and hangs up on
// demand.
//
// It owns no QEMU behaviour beyond the protocol: a command without a
// handler gets QEMU's CommandNotFound error, and what a handler answers is
// the test's business. It does not import package qmp, so qmp's own tests
// can use it.
package qmptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Handler answers one command. args is the command's "arguments" member as
// sent (nil when absent); files are the descriptors received since the
// previous command, which the server closes when the handler returns. The
// result is marshalled as the "return" member ({} when nil). An error
// becomes an error reply: of class GenericError with the error's text, or
// the class and desc of an *Error.
type Handler func(args json.RawMessage, files []*os.File) (any, error)

// Error is a handler's error with a chosen QMP error class, such as
// DeviceNotFound.
type Error struct {
	Class string
	Desc  string
}

func (e *Error) Error() string { return e.Class + ": " + e.Desc }

// Command is one command the server received.
type Command struct {
	// Name is the "execute" member.
	Name string
	// Args is the "arguments" member as sent, nil when absent.
	Args json.RawMessage
	// Files is how many descriptors came with it.
	Files int
}

// Greeting is the greeting the server sends, QEMU 7.2.0's shape.
const Greeting = `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "qmptest"}, "capabilities": ["oob"]}}`

// Server is a fake QMP server. Its methods may be called from any
// goroutine, handlers included.
type Server struct {
	t    testing.TB
	path string
	ln   *net.UnixListener
	// wg counts the accept loop and one goroutine per connection.
	wg sync.WaitGroup

	mu       sync.Mutex
	handlers map[string]Handler
	commands []Command
	conns    map[*conn]struct{}
	closed   bool
}

type conn struct {
	c *net.UnixConn

	wmu        sync.Mutex // serialises writes of whole messages
	negotiated bool       // guarded by Server.mu
}

// NewServer starts a server listening on a socket in t.TempDir(). It is
// closed by t.Cleanup: the listener and every connection are closed and
// their goroutines waited for, so handlers must return by then.
func NewServer(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "qmp.sock")
	if len(path) >= len(unix.RawSockaddrUnix{}.Path) {
		// A long TMPDIR or test name: fall back to a shorter directory.
		d, err := os.MkdirTemp("", "qmp")
		if err != nil {
			t.Fatalf("qmptest: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		path = filepath.Join(d, "qmp.sock")
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("qmptest: listen: %v", err)
	}
	s := &Server{
		t:        t,
		path:     path,
		ln:       ln,
		handlers: make(map[string]Handler),
		conns:    make(map[*conn]struct{}),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.close)
	return s
}

// Path returns the socket's path, for qmp.Dial.
func (s *Server) Path() string { return s.path }

// Handle sets the handler of command, replacing any earlier one.
func (s *Server) Handle(command string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[command] = h
}

// Commands returns the commands received so far, qmp_capabilities
// included, in order of arrival.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Emit sends the event {"event": name, "data": data, "timestamp": now} to
// every client that has negotiated capabilities; data nil sends no data
// member. It returns once the event is written.
func (s *Server) Emit(name string, data any) {
	msg := struct {
		Event     string `json:"event"`
		Data      any    `json:"data,omitempty"`
		Timestamp struct {
			Seconds      int64 `json:"seconds"`
			Microseconds int64 `json:"microseconds"`
		} `json:"timestamp"`
	}{Event: name, Data: data}
	now := time.Now()
	msg.Timestamp.Seconds = now.Unix()
	msg.Timestamp.Microseconds = int64(now.Nanosecond() / 1000)
	b, err := json.Marshal(msg)
	if err != nil {
		s.t.Errorf("qmptest: Emit(%q): %v", name, err)
		return
	}
	for _, c := range s.clients(true) {
		c.write(b)
	}
}

// SendRaw writes b, as is, to every connected client: for tests of what a
// client does with bytes QEMU would not send.
func (s *Server) SendRaw(b []byte) {
	for _, c := range s.clients(false) {
		c.write(b)
	}
}

// Hangup closes every client connection, as QEMU exiting would; the
// server keeps listening for new ones.
func (s *Server) Hangup() {
	for _, c := range s.clients(false) {
		c.c.Close()
	}
}

func (s *Server) clients(negotiated bool) []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cs []*conn
	for c := range s.conns {
		if c.negotiated || !negotiated {
			cs = append(cs, c)
		}
	}
	return cs
}

func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
	s.Hangup()
	s.wg.Wait()
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		cn := &conn{c: c}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[cn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(cn)
	}
}

// request is one command as a client sends it.
type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

// serve runs one connection: greeting, then one command at a time, as
// QEMU's monitor does without out-of-band execution.
func (s *Server) serve(c *conn) {
	defer s.wg.Done()
	r := &fdReader{c: c.c, oob: make([]byte, unix.CmsgSpace(16*4))}
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.c.Close()
		closeFiles(r.take())
	}()
	if !c.write([]byte(Greeting)) {
		return
	}
	dec := json.NewDecoder(r)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			// End of stream, or input QEMU would answer with an id-less
			// error: a test client never sends it, so hang up.
			return
		}
		files := r.take()
		ret, qerr := s.execute(c, req, files)
		closeFiles(files)
		if !c.write(replyBytes(req.ID, ret, qerr)) {
			return
		}
	}
}

// execute records and dispatches one command, and returns its return
// value or QMP error.
func (s *Server) execute(c *conn, req request, files []*os.File) (any, *Error) {
	s.mu.Lock()
	s.commands = append(s.commands, Command{Name: req.Execute, Args: req.Arguments, Files: len(files)})
	negotiated := c.negotiated
	h := s.handlers[req.Execute]
	if req.Execute == "qmp_capabilities" && !negotiated {
		c.negotiated = true
	}
	s.mu.Unlock()

	switch {
	case req.Execute == "qmp_capabilities" && negotiated:
		return nil, &Error{"CommandNotFound", "Capabilities negotiation is already complete, command ignored"}
	case req.Execute == "qmp_capabilities":
		return nil, nil
	case !negotiated:
		return nil, &Error{"CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'"}
	case h == nil:
		return nil, &Error{"CommandNotFound", fmt.Sprintf("The command %s has not been found", req.Execute)}
	}
	ret, err := h(req.Arguments, files)
	if err != nil {
		var qe *Error
		if errors.As(err, &qe) {
			return nil, qe
		}
		return nil, &Error{"GenericError", err.Error()}
	}
	return ret, nil
}

// replyBytes is a reply in QEMU's shape, the id echoed when there was one.
func replyBytes(id json.RawMessage, ret any, qerr *Error) []byte {
	type qmpError struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	}
	msg := struct {
		Return any             `json:"return,omitempty"`
		Error  *qmpError       `json:"error,omitempty"`
		ID     json.RawMessage `json:"id,omitempty"`
	}{ID: id}
	if qerr != nil {
		msg.Error = &qmpError{qerr.Class, qerr.Desc}
	} else {
		if ret == nil {
			ret = struct{}{}
		}
		msg.Return = ret
	}
	b, err := json.Marshal(msg)
	if err != nil {
		msg.Return = nil
		msg.Error = &qmpError{"GenericError", "qmptest: marshal return value: " + err.Error()}
		b, _ = json.Marshal(msg)
	}
	return b
}

// write writes one message followed by CRLF; false when the connection is
// gone.
func (c *conn) write(b []byte) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.c.Write(append(slices.Clip(b), '\r', '\n'))
	return err == nil
}

// fdReader reads a connection with recvmsg, keeping the descriptors that
// arrive as SCM_RIGHTS until taken.
type fdReader struct {
	c     *net.UnixConn
	oob   []byte
	files []*os.File
}

func (r *fdReader) Read(p []byte) (int, error) {
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, r.oob)
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(r.oob[:oobn])
		if perr == nil {
			for i := range msgs {
				fds, ferr := unix.ParseUnixRights(&msgs[i])
				if ferr != nil {
					continue
				}
				for _, fd := range fds {
					r.files = append(r.files, os.NewFile(uintptr(fd), fmt.Sprintf("qmptest-fd-%d", fd)))
				}
			}
		}
	}
	if n < 0 { // recvmsg's -1 on error
		n = 0
	}
	return n, err
}

func (r *fdReader) take() []*os.File {
	fs := r.files
	r.files = nil
	return fs
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
