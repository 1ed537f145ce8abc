package mpqemu

import (
	"encoding/json"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/mdev/transport"
)

// Transport is QEMU's multi-process protocol as a transport.Socket: each
// instance listens at <socket dir>/<uuid>.sock for `-device
// x-pci-proxy-dev,fd=N` (docs/mpqemu.md).
type Transport struct{}

var (
	_ transport.Socket   = Transport{}
	_ transport.Pausable = (*Conn)(nil)
)

// Name is "mpqemu".
func (Transport) Name() string { return "mpqemu" }

// Suffix is ".sock".
func (Transport) Suffix() string { return ".sock" }

// NewSession returns a Conn serving dev on conn.
func (Transport) NewSession(conn *net.UnixConn, dev transport.Device) transport.Session {
	return NewConn(conn, dev.Regs, dev.Config, dev.Memory, dev.Log)
}

// Adopt returns a Conn serving dev on a connection an earlier vgpud
// handed over; extra is the irqfd and the resample eventfd, or nothing.
// An mpqemu session has no state of its own to adopt.
func (Transport) Adopt(conn *net.UnixConn, extra []int, state json.RawMessage, dev transport.Device) (transport.Session, error) {
	var bad error
	switch {
	case len(state) != 0:
		bad = fmt.Errorf("mpqemu: adopt: a session state of %d bytes, mpqemu keeps none", len(state))
	case len(extra) != 0 && len(extra) != 2:
		bad = fmt.Errorf("mpqemu: adopt: %d extra fds, want 0 or 2 (irqfd, resample)", len(extra))
	}
	if bad != nil {
		for _, fd := range extra {
			unix.Close(fd)
		}
		conn.Close()
		return nil, bad
	}
	c := NewConn(conn, dev.Regs, dev.Config, dev.Memory, dev.Log)
	if len(extra) == 2 {
		if err := c.AdoptIRQ(extra[0], extra[1]); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}
