package migrate

import (
	"context"
	"fmt"
	"net"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate/qmp"
)

// ProxyDriver is QEMU's device for a vGPU served over the multi-process
// protocol.
const ProxyDriver = "x-pci-proxy-dev"

// pciSlot returns the PCI slot (on bus 0) of the device with QEMU id id,
// from query-pci: a re-plugged vGPU goes back to the same address, so the
// guest finds it where its driver left it.
func pciSlot(ctx context.Context, mon *qmp.Monitor, id string) (int, error) {
	var buses []struct {
		Bus     int `json:"bus"`
		Devices []struct {
			Slot   int    `json:"slot"`
			QdevID string `json:"qdev_id"`
		} `json:"devices"`
	}
	if err := mon.Execute(ctx, "query-pci", nil, &buses); err != nil {
		return 0, fmt.Errorf("query-pci: %w", err)
	}
	for _, b := range buses {
		for _, d := range b.Devices {
			if d.QdevID == id && b.Bus == 0 {
				return d.Slot, nil
			}
		}
	}
	return 0, fmt.Errorf("QEMU has no device %q on PCI bus 0", id)
}

// plug connects a fresh socket to inst, hands it to QEMU (getfd) and
// hot-plugs a proxy device on it at slot.
func plug(ctx context.Context, mon *qmp.Monitor, inst *mdev.Instance, id string, slot int) error {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		return fmt.Errorf("plug %s: %w", id, err)
	}
	f, err := conn.File()
	conn.Close()
	if err != nil {
		return fmt.Errorf("plug %s: %w", id, err)
	}
	defer f.Close()
	fdname := "vgpud-" + id
	if err := mon.GetFD(ctx, fdname, f); err != nil {
		return fmt.Errorf("plug %s: %w", id, err)
	}
	if err := mon.DeviceAdd(ctx, ProxyDriver, id, map[string]any{"fd": fdname, "addr": fmt.Sprintf("0x%x", slot)}); err != nil {
		_ = mon.CloseFD(ctx, fdname)
		return fmt.Errorf("plug %s: %w", id, err)
	}
	return nil
}

// unplug removes the proxy device and waits until the guest has let it go.
func unplug(ctx context.Context, mon *qmp.Monitor, id string) error {
	if err := mon.DeviceDel(ctx, id); err != nil {
		return fmt.Errorf("unplug %s: %w", id, err)
	}
	if err := mon.WaitDeviceDeleted(ctx, id); err != nil {
		return fmt.Errorf("unplug %s: the guest did not eject it: %w", id, err)
	}
	return nil
}
