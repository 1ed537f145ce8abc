package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/qmp"
)

// Monitor is a libvirt domain's QEMU monitor, reached through `virsh
// qemu-monitor-command` (libvirt owns the QMP socket). It implements
// migrate.Monitor. libvirt marks the domain tainted ("custom monitor
// control commands issued"); nothing else changes for it.
type Monitor struct {
	r      Runner
	domain string
	// PollEvery is how often WaitDeviceDeleted asks query-pci (default
	// 100 ms; each ask is a virsh process, tens of milliseconds).
	PollEvery time.Duration
}

var _ migrate.Monitor = (*Monitor)(nil)

// NewMonitor returns the monitor of domain (a name, id or UUID).
func NewMonitor(r Runner, domain string) *Monitor { return &Monitor{r: r, domain: domain} }

// Execute implements migrate.Monitor.
func (m *Monitor) Execute(ctx context.Context, command string, args, result any) error {
	return m.execute(ctx, command, args, nil, result)
}

// execute runs one QMP command, files passed as descriptors 3, 4, ...
func (m *Monitor) execute(ctx context.Context, command string, args any, files []*os.File, result any) error {
	cmd := map[string]any{"execute": command}
	if args != nil {
		cmd["arguments"] = args
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return fmt.Errorf("qmp %s: encode: %w", command, err)
	}
	vargs := []string{"qemu-monitor-command", "--domain", m.domain}
	if len(files) > 0 {
		fds := make([]string, len(files))
		for i := range files {
			fds[i] = strconv.Itoa(3 + i)
		}
		vargs = append(vargs, "--pass-fds", strings.Join(fds, ","))
	}
	out, err := m.r.Run(ctx, files, append(vargs, "--cmd", string(b))...)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	ret, err := parseReply(out)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	if result != nil {
		if err := json.Unmarshal(ret, result); err != nil {
			return fmt.Errorf("qmp %s: decode return value: %w", command, err)
		}
	}
	return nil
}

// GetFD implements migrate.Monitor: f goes to virsh as descriptor 3,
// which virsh passes on to libvirtd and libvirtd to QEMU with the
// command.
func (m *Monitor) GetFD(ctx context.Context, name string, f *os.File) error {
	return m.execute(ctx, "getfd", map[string]string{"fdname": name}, []*os.File{f}, nil)
}

// CloseFD implements migrate.Monitor.
func (m *Monitor) CloseFD(ctx context.Context, name string) error {
	return m.Execute(ctx, "closefd", map[string]string{"fdname": name}, nil)
}

// DeviceAdd implements migrate.Monitor.
func (m *Monitor) DeviceAdd(ctx context.Context, driver, id string, props map[string]any) error {
	args, err := qmp.DeviceAddArgs(driver, id, props)
	if err != nil {
		return err
	}
	return m.Execute(ctx, "device_add", args, nil)
}

// DeviceDel implements migrate.Monitor.
func (m *Monitor) DeviceDel(ctx context.Context, id string) error {
	return m.Execute(ctx, "device_del", map[string]string{"id": id}, nil)
}

// WaitDeviceDeleted implements migrate.Monitor. Each virsh command is a
// connection of its own, so QEMU's DEVICE_DELETED event would need a
// `virsh qemu-monitor-event` started before device_del, with no way to
// know when it listens; instead it asks query-pci until the device is
// gone, or ctx ends.
func (m *Monitor) WaitDeviceDeleted(ctx context.Context, id string) error {
	every := m.PollEvery
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_, err := migrate.DeviceSlot(ctx, m, id)
		switch {
		case errors.Is(err, migrate.ErrNoDevice):
			return nil
		case err != nil:
			return fmt.Errorf("wait for %s's removal: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s's removal: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}
