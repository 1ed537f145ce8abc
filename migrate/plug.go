package migrate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate/qmp"
)

// ProxyDriver is QEMU's device for a vGPU served over the multi-process
// protocol; VFIOUserDriver, over vfio-user (QEMU 10.1 and later).
const (
	ProxyDriver    = "x-pci-proxy-dev"
	VFIOUserDriver = "vfio-user-pci"
)

// Monitor is what plugging and unplugging a vGPU needs of a VM's QEMU
// monitor. *qmp.Monitor implements it over the VM's QMP socket; package
// migrate/libvirt implements it through virsh for a libvirt domain, whose
// QMP socket libvirt keeps for itself. A QMP error reply is returned as a
// wrapped *qmp.Error either way, so errors.Is(err, qmp.ErrDeviceNotFound)
// works on both.
type Monitor interface {
	// Execute runs one QMP command and decodes its return value into
	// result (nil: ignored).
	Execute(ctx context.Context, command string, args, result any) error
	// GetFD hands QEMU a duplicate of f under name (QMP getfd).
	GetFD(ctx context.Context, name string, f *os.File) error
	// CloseFD makes QEMU close the descriptor it got under name.
	CloseFD(ctx context.Context, name string) error
	// DeviceAdd hot-plugs a device (QMP device_add).
	DeviceAdd(ctx context.Context, driver, id string, props map[string]any) error
	// DeviceDel asks for a device's removal (QMP device_del).
	DeviceDel(ctx context.Context, id string) error
	// WaitDeviceDeleted returns once QEMU has removed device id (the guest
	// ejected it), or when ctx ends.
	WaitDeviceDeleted(ctx context.Context, id string) error
}

var _ Monitor = (*qmp.Monitor)(nil)

// ErrNoDevice: the VM has no device with the id asked for on PCI bus 0.
var ErrNoDevice = errors.New("QEMU has no such device on PCI bus 0")

// DeviceSlot returns the PCI slot (on bus 0) of the device with QEMU id
// id, from query-pci, or an error wrapping ErrNoDevice when the VM has no
// such device: a re-plugged vGPU goes back to the same address, so the
// guest finds it where its driver left it.
func DeviceSlot(ctx context.Context, mon Monitor, id string) (int, error) {
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
	return 0, fmt.Errorf("device %q: %w", id, ErrNoDevice)
}

// plug hot-plugs inst's vGPU as QEMU device id at slot: with vfioUser
// (a manager serving vfio-user), a vfio-user-pci device that QEMU
// connects to the instance's socket; otherwise it connects a fresh socket
// to inst, hands it to QEMU (getfd) and hot-plugs a proxy device on it.
func plug(ctx context.Context, mon Monitor, inst *mdev.Instance, id string, slot int, vfioUser bool) error {
	addr := fmt.Sprintf("0x%x", slot)
	if vfioUser {
		// QEMU connects to the instance's socket as it realizes the
		// device.
		err := mon.DeviceAdd(ctx, VFIOUserDriver, id, map[string]any{"addr": addr,
			"socket": map[string]any{"type": "unix", "path": inst.Socket()}})
		if err != nil {
			return fmt.Errorf("plug %s: %w", id, err)
		}
		return nil
	}
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
	if err := mon.DeviceAdd(ctx, ProxyDriver, id, map[string]any{"fd": fdname, "addr": addr}); err != nil {
		_ = mon.CloseFD(ctx, fdname)
		return fmt.Errorf("plug %s: %w", id, err)
	}
	return nil
}

// unplug removes the proxy device and waits until the guest has let it go.
func unplug(ctx context.Context, mon Monitor, id string) error {
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
	// DeviceID is the vGPU's QEMU id; "" means DefaultDeviceID.
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
	Programs uint32 `json:"programs"`
	AgentErr string `json:"agent_error,omitempty"`
	// AbandonedMigration: the old daemon had left a live migration of
	// the VM under way, which was ended (AbandonLive).
	AbandonedMigration bool          `json:"abandoned_migration,omitempty"`
	Took               time.Duration `json:"took_ns"`
}

// Reattach gives a running VM its vGPU back after vgpud restarted (cleanly
// or not): the VM's QEMU still has a proxy device (or, on vfio-user, a
// vfio-user-pci device) on the old daemon's dead socket. It removes that
// device (device_del; the guest ejects it), plugs a fresh one on instance
// id's socket at the same PCI slot (getfd + device_add, or a device_add
// that QEMU connects itself), and tells the guest agent that the device came
// back without its state (agentmsg.ResumeLost): the device state lived in
// the old daemon's workers and is gone, so the guest's programs open the
// device anew and report what they lost. A guest without an agent gets
// the device back all the same; its programs see a dead device until they
// reopen it. Reattach reaches QEMU over the VM's QMP socket (opts.QMP);
// ReattachVia does the same over a monitor the caller has.
func Reattach(ctx context.Context, m *mdev.Manager, id string, opts ReattachOptions) (*ReattachReport, error) {
	inst, err := m.Get(id)
	if err != nil {
		return nil, fmt.Errorf("reattach: %w", err)
	}
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	path := opts.QMP
	if path == "" {
		path = inst.QMPSocket()
	}
	mon, err := qmp.Dial(ctx, path)
	if err != nil {
		if inst.Attached() {
			return nil, fmt.Errorf("reattach %s: %w", id, ErrAttached)
		}
		return nil, fmt.Errorf("reattach %s: the VM's monitor %s: %w", id, path, err)
	}
	defer mon.Close()
	// A live migration the old daemon left under way goes first, whether
	// or not the VM's vGPU is still attached.
	abandoned, err := AbandonLive(ctx, mon, agentReconnected(inst))
	if err != nil {
		return nil, fmt.Errorf("reattach %s: %w", id, err)
	}
	rep, err := ReattachVia(ctx, m, id, mon, opts)
	if rep != nil {
		rep.AbandonedMigration = abandoned
	}
	return rep, err
}

// agentReconnected returns what Reattach waits on before it lets a VM
// that a dead daemon's live migration left stopped run again: the VM's
// agent channel connected to this daemon (nil: the instance has none).
//
// QEMU 11.1's virtio-serial takes its chardev's handlers away while the
// VM is stopped, so it never hears that the old daemon's end of the
// agent channel closed. If the VM then runs and the guest writes on its
// port before the chardev has reconnected (QEMU tries once a second), the
// write fails and QEMU throttles the port for good: the reconnection
// does not clear it, and nothing the guest agent says reaches vgpud
// again (its Hello included). Connected before the VM runs, the guest's
// writes go to the new connection. docs/migration.md "Failures roll
// back" has the QEMU trace.
func agentReconnected(inst *mdev.Instance) func(context.Context) {
	a := inst.Agent()
	if a == nil {
		return nil
	}
	return func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, agentReconnectWait)
		defer cancel()
		_ = a.WaitConnected(ctx) // none by then: the VM runs all the same
	}
}

// agentReconnectWait bounds agentReconnected's wait: QEMU's agent chardev
// reconnects once a second (qemuvm's reconnect-ms).
const agentReconnectWait = 5 * time.Second

func (o ReattachOptions) withDefaults() ReattachOptions {
	if o.DeviceID == "" {
		o.DeviceID = DefaultDeviceID
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	return o
}

// ReattachVia is Reattach over mon, the VM's monitor that the caller
// reaches its own way (opts.QMP is not used): a libvirt domain's, through
// virsh. When the VM has no device opts.DeviceID any more, a fresh one is
// plugged at DefaultSlot and the guest is told of the loss all the same.
func ReattachVia(ctx context.Context, m *mdev.Manager, id string, mon Monitor, opts ReattachOptions) (*ReattachReport, error) {
	start := time.Now()
	opts = opts.withDefaults()
	inst, err := m.Get(id)
	if err != nil {
		return nil, fmt.Errorf("reattach: %w", err)
	}
	if inst.Attached() {
		return nil, fmt.Errorf("reattach %s: %w", id, ErrAttached)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	rep := &ReattachReport{Instance: inst.UUID(), Slot: DefaultSlot}
	slot, err := DeviceSlot(ctx, mon, opts.DeviceID)
	switch {
	case err == nil:
		rep.Slot = slot
		if err := unplug(ctx, mon, opts.DeviceID); err != nil {
			return rep, fmt.Errorf("reattach %s: %w", id, err)
		}
		rep.Unplugged = true
	case !errors.Is(err, ErrNoDevice):
		return rep, fmt.Errorf("reattach %s: %w", id, err)
	}
	if err := plug(ctx, mon, inst, opts.DeviceID, rep.Slot, m.KeepsDeviceOnMigration()); err != nil {
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

// Plug hot-plugs instance id's vGPU into a VM that has none (no device
// opts.DeviceID): a fresh proxy device at slot (0: DefaultSlot) on the
// instance's socket, over mon. The guest is told nothing: it finds the
// device as it boots, or through ACPI hotplug. It refuses an instance
// attached to a VM already (ErrAttached).
func Plug(ctx context.Context, m *mdev.Manager, id string, mon Monitor, slot int, opts ReattachOptions) error {
	opts = opts.withDefaults()
	inst, err := m.Get(id)
	if err != nil {
		return fmt.Errorf("plug: %w", err)
	}
	if inst.Attached() {
		return fmt.Errorf("plug %s: %w", id, ErrAttached)
	}
	if slot == 0 {
		slot = DefaultSlot
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if err := plug(ctx, mon, inst, opts.DeviceID, slot, m.KeepsDeviceOnMigration()); err != nil {
		return fmt.Errorf("plug %s: %w", id, err)
	}
	return nil
}

// ErrAttached: the instance is attached to a VM already.
var ErrAttached = errors.New("the instance is attached to a VM already")
