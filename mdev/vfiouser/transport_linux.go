package vfiouser

import (
	"net"

	"github.com/vgpud/vgpud/mdev/transport"
)

// Transport is vfio-user as a transport.Socket: each instance listens at
// <socket dir>/<uuid>.vfio-user.sock for QEMU's vfio-user-pci
// (docs/vfio-user.md).
type Transport struct{}

var _ transport.Socket = Transport{}

// Name is "vfio-user".
func (Transport) Name() string { return "vfio-user" }

// KeepsDeviceOnMigration is true: QEMU 11.1's vfio-user-pci has no
// migration state and sets no migration blocker, so a VM migrates with the
// vGPU attached and vgpud moves the device's state itself
// (docs/migration.md).
func (Transport) KeepsDeviceOnMigration() bool { return true }

// ConnectedByVM is true: QEMU's vfio-user-pci dials the instance socket
// itself, so the connection's peer (SO_PEERCRED) is the VM's QEMU, the
// only process whose agent channel connection the instance takes
// (agentchan.Config.Peer). An mpqemu proxy's socket is dialed by whoever
// starts QEMU and passed to it.
func (Transport) ConnectedByVM() bool { return true }

// Suffix is ".vfio-user.sock".
func (Transport) Suffix() string { return ".vfio-user.sock" }

// NewSession returns a Session serving dev on conn.
func (Transport) NewSession(conn *net.UnixConn, dev transport.Device) transport.Session {
	return NewSession(conn, dev)
}
