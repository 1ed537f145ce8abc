package xentest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/xen"
)

// StartTimeout bounds how long Attach waits for the server to claim the
// PCI function.
const StartTimeout = 10 * time.Second

// Session is a fake domain with a xen.Server serving one vGPU in it.
type Session struct {
	H      *Hypervisor
	Server *xen.Server
	done   chan struct{}
	err    error
}

// Start creates a fake domain with ramBytes of RAM and vcpus vCPUs and
// runs serve (which must run the server until it ends, e.g. srv.Serve or
// an mdev.Instance's Attach) on its own goroutine, until the server
// claims DefaultSBDF. Wait returns serve's error.
func Start(ramBytes uint64, vcpus int, dev transport.Device, serve func(*xen.Server) error) (*Session, error) {
	h, err := New(ramBytes, vcpus)
	if err != nil {
		return nil, err
	}
	srv := xen.NewServer(h, xen.Config{Domain: h.Domain(), SBDF: DefaultSBDF}, dev)
	s := &Session{H: h, Server: srv, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = serve(srv)
	}()
	started := make(chan error, 1)
	go func() { started <- h.WaitServing(DefaultSBDF, StartTimeout) }()
	select {
	case err = <-started:
	case <-s.done:
		h.Close() // ends WaitServing
		<-started
		return nil, fmt.Errorf("xentest: start: server ended before serving: %w", s.err)
	}
	if err != nil {
		h.Close()
		<-s.done
		return nil, fmt.Errorf("xentest: start: %w", err)
	}
	return s, nil
}

// Done is closed when serve returned.
func (s *Session) Done() <-chan struct{} { return s.done }

// Wait waits up to timeout for serve to return and returns its error.
func (s *Session) Wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.done:
		return s.err
	case <-t.C:
		return fmt.Errorf("xentest: server still running after %v: %w", timeout, ErrTimeout)
	}
}

// Attach serves dev with a xen.Server in a fake domain of ramBytes RAM and
// 2 vCPUs and returns the domain's Guest, probed and programmed. stop
// destroys the domain, waits for Serve and returns its error (nil after
// the domain went away); calling it again returns the same.
func Attach(dev transport.Device, ramBytes uint64) (g *Guest, stop func() error, err error) {
	s, err := Start(ramBytes, 2, dev, func(srv *xen.Server) error { return srv.Serve(context.Background()) })
	if err != nil {
		return nil, nil, err
	}
	stop = sync.OnceValue(func() error {
		if g != nil {
			g.Close()
		}
		s.H.Close()
		return s.Wait(StartTimeout)
	})
	if g, err = NewGuest(s.H, DefaultSBDF); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	return g, stop, nil
}
