package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mmio"
)

// Errors a Session's Serve returns that its owner must tell apart.
var (
	// ErrClosed is returned by Serve after Close, like http.ErrServerClosed.
	ErrClosed = errors.New("transport session closed")
	// ErrPaused is returned by a Pausable session's Serve after Pause,
	// between two messages; the session stays open and Serve may be
	// called again after Resume.
	ErrPaused = errors.New("transport session paused")
)

// ServeEnd is what a socket session's Serve returns once handling a
// message failed with err (not nil): ctx.Err() once ctx ended, ErrClosed
// once the session was closed, nil when the peer hung up between
// messages (io.EOF), else err wrapped as "name serve: ...". A protocol
// violation (errors.Is(err, protocol)) is also logged: the connection
// closes on it.
func ServeEnd(ctx context.Context, closed *atomic.Bool, err, protocol error, log *slog.Logger, name string) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case closed.Load():
		return ErrClosed
	case errors.Is(err, io.EOF):
		return nil
	case errors.Is(err, protocol):
		log.Error(name+": closing connection", "err", err)
	}
	return fmt.Errorf("%s serve: %w", name, err)
}

// MemoryMap receives the guest-RAM map a transport learns from its peer
// (mpqemu's SYNC_SYSMEM, vfio-user's DMA_MAP and DMA_UNMAP, the Xen
// guest's RAM): always the whole current map, which replaces the last
// one. Update takes ownership of the regions' fds, on success and on
// failure. Behind it is a guestmem.Map or whatever forwards the fds to
// where the device work runs (a worker process).
type MemoryMap interface {
	Update(regions []guestmem.Region) error
}

// Device is one vGPU as a transport sees it. Config's interrupt line is
// Regs.INTx(); a transport attaches its IRQ sink there
// (mmio.INTx.SetSink) and detaches it when its session ends.
type Device struct {
	Regs   *mmio.Device
	Config *mmio.ConfigSpace
	Memory MemoryMap
	Log    *slog.Logger
}

// Session is one VM attachment a transport serves.
type Session interface {
	// Serve handles the peer's requests until it hangs up (nil), ctx ends
	// (ctx.Err()), Close is called (ErrClosed), the connection fails or
	// the peer breaks the protocol (an error naming what it sent). On
	// return the session holds no resources but what its owner gave it.
	Serve(ctx context.Context) error
	// Close ends the session; Serve returns. It may be called at any
	// time and more than once.
	Close() error
}

// Pausable is a session that can stop between two messages and go on
// later, and hand its connection to another process: an upgrade in place
// (docs/upgrade.md) passes what Handover returns to the new vgpud, whose
// Socket.Adopt serves it. A session that is not Pausable blocks an
// upgrade in place.
type Pausable interface {
	Session
	Pause()
	Resume()
	// Handover describes the paused session; its descriptors are still
	// the session's.
	Handover() (Handover, error)
}

// Handover is what a paused session hands to a new vgpud: its connection,
// the transport's other descriptors (mpqemu: the irqfd and the resample
// eventfd; vfio-user: the DMA windows' and the interrupts' fds), and the
// transport's own state of the session, which names those descriptors by
// their index in Extra (nil when the transport keeps none: mpqemu).
type Handover struct {
	Conn  int
	Extra []int
	State json.RawMessage
}

// Socket is a transport whose VMs connect to a Unix socket per instance
// (mpqemu, vfio-user). mdev listens at <socket dir>/<uuid><Suffix()> and
// hands each accepted connection to NewSession.
type Socket interface {
	// Name names the transport in logs, metrics and the API.
	Name() string
	// Suffix is the instance socket's name after the UUID (".sock").
	Suffix() string
	// NewSession returns a session serving dev on conn; it owns conn.
	NewSession(conn *net.UnixConn, dev Device) Session
	// Adopt returns a session serving dev on a connection a previous
	// vgpud handed over (Pausable.Handover: its Extra and State); it owns
	// conn and extra, and closes them when it fails. The state came from
	// another process: Adopt checks it as it would a peer's message.
	Adopt(conn *net.UnixConn, extra []int, state json.RawMessage, dev Device) (Session, error)
}
