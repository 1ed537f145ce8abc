package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// pausable is a listener whose Accept an upgrade pauses: connections then
// wait in the listen queue for whichever process accepts next. After a
// commit it stays paused until the process exits: its server must not
// return (run would shut down what the new process serves).
type pausable struct {
	net.Listener
	mu     sync.Mutex
	paused bool
	resume chan struct{}
}

// newPausable wraps l, not paused.
func newPausable(l net.Listener) *pausable {
	if ul, ok := l.(*net.UnixListener); ok {
		// Its socket file is removed by whoever stops serving it for
		// good, not by an http.Server returning (after a handover the
		// new process serves the same file).
		ul.SetUnlinkOnClose(false)
	}
	return &pausable{Listener: l, resume: make(chan struct{})}
}

// deadline sets the listener's accept deadline where it has one.
func (p *pausable) deadline(t time.Time) {
	if d, ok := p.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(t)
	}
}

// Accept is the listener's, waiting while it is paused.
func (p *pausable) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return c, err
		}
		p.mu.Lock()
		paused, resume := p.paused, p.resume
		p.mu.Unlock()
		if !paused {
			p.deadline(time.Time{})
			continue
		}
		<-resume
	}
}

// pause stops Accept (a deadline in the past wakes one in progress).
func (p *pausable) pause() {
	p.mu.Lock()
	p.paused = true
	p.resume = make(chan struct{})
	p.mu.Unlock()
	p.deadline(time.Unix(1, 0))
}

// unpause lets Accept go on.
func (p *pausable) unpause() {
	p.mu.Lock()
	p.paused = false
	close(p.resume)
	p.mu.Unlock()
	p.deadline(time.Time{})
}

// conn is the listening socket, to hand over.
func (p *pausable) conn() (syscall.Conn, error) {
	sc, ok := p.Listener.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no descriptor", p.Listener)
	}
	return sc, nil
}
