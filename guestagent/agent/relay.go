package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// DefaultRelaySocket is where vgpu-agent serves guest programs.
const DefaultRelaySocket = "/run/vgpu-agent.sock"

// Relay serves the agent channel to other guest programs over a Unix
// socket, answering like the host: Hello, Watch -> Completed (through the
// upstream Client's channel) and the host's Hints.
type Relay struct {
	up  *Client
	l   *net.UnixListener
	log *slog.Logger
	wg  sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewRelay listens on path.
func NewRelay(up *Client, path string, log *slog.Logger) (*Relay, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("relay: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return &Relay{up: up, l: l, log: log, conns: map[net.Conn]struct{}{}}, nil
}

// Serve accepts guest programs until Close or ctx ends.
func (r *Relay) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	for {
		c, err := r.l.AcceptUnix()
		if err != nil {
			r.wg.Wait()
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("relay: %w", err)
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(c)
			r.mu.Lock()
			delete(r.conns, c)
			r.mu.Unlock()
		}()
	}
}

// Close stops the relay and its connections.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.l.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) serve(c net.Conn) {
	defer c.Close()
	var (
		watch atomic.Uint64 // 0 or 1<<32|index
		ready atomic.Bool
	)
	local := make(chan struct{}, 1)
	kick := func() {
		select {
		case local <- struct{}{}:
		default:
		}
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		rd := agentmsg.NewReader(c)
		for {
			m, err := rd.Read()
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *agentmsg.Hello:
				if _, err := agentmsg.Negotiate(m); err != nil {
					return
				}
				ready.Store(true)
			case *agentmsg.Watch:
				for {
					w := watch.Load()
					if w != 0 && int32(uint32(w)-m.Index) <= 0 {
						break
					}
					if watch.CompareAndSwap(w, 1<<32|uint64(m.Index)) {
						break
					}
				}
				r.up.send(m) // best effort: re-sent on every upstream change
			}
			kick()
		}
	}()
	greeted := false
	var lastHints agentmsg.Hints
	for {
		ch := r.up.Changed()
		if ready.Load() {
			var buf []byte
			if !greeted {
				v := uint16(agentmsg.Version)
				buf = agentmsg.Append(buf, &agentmsg.Hello{MinVersion: v, MaxVersion: v, Features: agentmsg.FeatureWatch | agentmsg.FeatureHints, Ident: "vgpu-agent relay"})
				greeted = true
			}
			done := r.up.Done()
			if w := watch.Load(); w != 0 {
				if int32(done-1-uint32(w)) >= 0 {
					if watch.CompareAndSwap(w, 0) {
						buf = agentmsg.Append(buf, &agentmsg.Completed{Done: done})
					}
				} else {
					r.up.send(&agentmsg.Watch{Index: uint32(w)})
				}
			}
			if h, ok := r.up.Hints(); ok && h != lastHints {
				lastHints = h
				buf = agentmsg.Append(buf, &h)
			}
			if len(buf) > 0 {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}
		select {
		case <-readDone:
			return
		case <-ch:
		case <-local:
		}
	}
}
