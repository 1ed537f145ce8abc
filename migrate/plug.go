package migrate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

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

// DefaultSlot is the PCI slot a vGPU is re-plugged at when its VM no
// longer has the device (mdev/qemuvm.ProxySlot, where vgpuctl vm puts it).
const DefaultSlot = 0x10

// ReattachOptions configure Reattach.
type ReattachOptions struct {
	// QMP is the VM's monitor socket; "" means the instance's conventional
	// path (mdev.Instance.QMPSocket).
	QMP string
	// DeviceID is the proxy device's QEMU id; "" means DefaultDeviceID.
	DeviceID string
	// Timeout bounds the whole reattach (0: 2 minutes): the guest's
	// ejecting the dead device and its agent's answer included.
	Timeout time.Duration
}

// ReattachReport says what Reattach did.
type ReattachReport struct {
	Instance string `json:"instance"`
	Slot     int    `json:"slot"`
	// Unplugged: the VM still had the dead device, which was removed.
	Unplugged bool `json:"unplugged"`
	// Programs is how many guest programs acknowledged the loss (0 with
	// AgentErr set when the guest agent did not answer).
	Programs uint32        `json:"programs"`
	AgentErr string        `json:"agent_error,omitempty"`
	Took     time.Duration `json:"took_ns"`
}

// Reattach gives a running VM its vGPU back after vgpud restarted (cleanly
// or not): the VM's QEMU still has a proxy device on the old daemon's
// dead socket. It removes that device (device_del; the guest ejects it),
// plugs a fresh one on instance id's socket at the same PCI slot
// (getfd + device_add), and tells the guest agent that the device came
// back without its state (agentmsg.ResumeLost): the device state lived in
// the old daemon's workers and is gone, so the guest's programs open the
// device anew and report what they lost. A guest without an agent gets
// the device back all the same; its programs see a dead device until they
// reopen it.
func Reattach(ctx context.Context, m *mdev.Manager, id string, opts ReattachOptions) (*ReattachReport, error) {
	start := time.Now()
	if opts.DeviceID == "" {
		opts.DeviceID = DefaultDeviceID
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	inst, err := m.Get(id)
	if err != nil {
		return nil, fmt.Errorf("reattach: %w", err)
	}
	if inst.Attached() {
		return nil, fmt.Errorf("reattach %s: %w", id, ErrAttached)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	path := opts.QMP
	if path == "" {
		path = inst.QMPSocket()
	}
	mon, err := qmp.Dial(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("reattach %s: the VM's monitor %s: %w", id, path, err)
	}
	defer mon.Close()
	rep := &ReattachReport{Instance: inst.UUID(), Slot: DefaultSlot}
	if slot, err := pciSlot(ctx, mon, opts.DeviceID); err == nil {
		rep.Slot = slot
		if err := unplug(ctx, mon, opts.DeviceID); err != nil {
			return rep, fmt.Errorf("reattach %s: %w", id, err)
		}
		rep.Unplugged = true
	}
	if err := plug(ctx, mon, inst, opts.DeviceID, rep.Slot); err != nil {
		return rep, fmt.Errorf("reattach %s: %w", id, err)
	}
	if a := inst.Agent(); a != nil {
		n, err := a.Lost(ctx, opts.Timeout/2)
		rep.Programs = n
		if err != nil {
			rep.AgentErr = err.Error()
		}
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// ErrAttached: the instance is attached to a VM already.
var ErrAttached = errors.New("the instance is attached to a VM already")
