package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// vfioUserSuffix ends the socket of an instance whose vgpud runs with
// -transport vfio-user (mdev/vfiouser.Transport.Suffix).
const vfioUserSuffix = ".vfio-user.sock"

// instanceBase is an instance socket's path without its transport's
// suffix: <run dir>/instances/<uuid>, where the agent socket
// (<uuid>.agent.sock) and QEMU's monitor (<uuid>.qmp) go.
func instanceBase(socket string) string {
	if b, ok := strings.CutSuffix(socket, vfioUserSuffix); ok {
		return b
	}
	return strings.TrimSuffix(socket, ".sock")
}

// vmQEMU says how vgpuctl vm runs QEMU.
type vmQEMU struct {
	binary    string // -qemu
	binarySet bool   // -qemu was given
	vmmRun    string // -vmm-run: scripts/vmm-run.sh
	vmmRoot   string // -vmm-root: build/vmm-root
	printOnly bool   // -print: no socket is dialled
}

// addDevice attaches the instance listening at socket to cfg as its
// device number i: an mpqemu socket as x-pci-proxy-dev (vgpuctl dials it
// and hands QEMU the connection: the caller closes cfg.Devices' files
// once QEMU started), a vfio-user socket as vfio-user-pci (QEMU connects
// itself).
func (q *vmQEMU) addDevice(cfg *qemuvm.Config, i int, id, socket string) error {
	name := fmt.Sprintf("vgpu%d", i)
	if strings.HasSuffix(socket, vfioUserSuffix) {
		cfg.VFIOUser = append(cfg.VFIOUser, qemuvm.VFIOUserDevice{ID: name, Socket: socket})
		return nil
	}
	dev := qemuvm.ProxyDevice{ID: name, FD: os.Stdin} // -print only shows fd numbers
	if !q.printOnly {
		f, err := qemuvm.DialProxy(socket)
		if err != nil {
			return fmt.Errorf("instance %s: %w", id, err)
		}
		dev.FD = f
	}
	cfg.Devices = append(cfg.Devices, dev)
	return nil
}

// finish picks the QEMU: with a vfio-user device and no -qemu, QEMU 11.1
// from the VMM root (docs/vmm-root.md), whose vfio-user-pci the host's
// QEMU 7.2 lacks; else the -qemu binary as it is. Call it once cfg's
// files and sockets are set.
func (q *vmQEMU) finish(cfg *qemuvm.Config) error {
	cfg.QEMU = q.binary
	if len(cfg.VFIOUser) == 0 {
		return nil
	}
	if q.binarySet {
		cfg.Modern = true // a QEMU with vfio-user-pci is >= 10.1
		return nil
	}
	root, err := qemuvm.NewVMMRoot(q.vmmRun, q.vmmRoot)
	if err != nil {
		return fmt.Errorf("vm: a vfio-user instance needs QEMU >= 10.1: %w (or name one with -qemu)", err)
	}
	root.Apply(cfg)
	return nil
}
