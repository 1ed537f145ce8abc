package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// RunState is QEMU's run state (QAPI RunState), as query-status reports it.
type RunState string

// Run states the migration code meets; QEMU 7.2 has a few more.
const (
	// RunStatePrelaunch: started with -S, never run.
	RunStatePrelaunch RunState = "prelaunch"
	RunStateRunning   RunState = "running"
	// RunStatePaused: stopped by stop, or a migration destination that
	// must not run yet.
	RunStatePaused RunState = "paused"
	// RunStateInMigrate: a destination waiting for or receiving a
	// migration (-incoming).
	RunStateInMigrate RunState = "inmigrate"
	// RunStateFinishMigrate: a source stopped for its last pass.
	RunStateFinishMigrate RunState = "finish-migrate"
	// RunStatePostMigrate: a source whose migration completed; it stays
	// stopped.
	RunStatePostMigrate RunState = "postmigrate"
	RunStateShutdown    RunState = "shutdown"
)

// StatusInfo is query-status's answer (QAPI StatusInfo).
type StatusInfo struct {
	// Running is whether the vCPUs run.
	Running bool `json:"running"`
	// Status is the run state.
	Status RunState `json:"status"`
}

// QueryStatus runs "query-status": the VM's run state.
func (m *Monitor) QueryStatus(ctx context.Context) (StatusInfo, error) {
	var st StatusInfo
	err := m.Execute(ctx, "query-status", nil, &st)
	return st, err
}

// Stop runs "stop": pause the vCPUs.
func (m *Monitor) Stop(ctx context.Context) error {
	return m.Execute(ctx, "stop", nil, nil)
}

// Cont runs "cont": resume (or first start, after -S) the vCPUs.
func (m *Monitor) Cont(ctx context.Context) error {
	return m.Execute(ctx, "cont", nil, nil)
}

// Quit runs "quit": QEMU exits after replying, closing the connection.
func (m *Monitor) Quit(ctx context.Context) error {
	return m.Execute(ctx, "quit", nil, nil)
}

// GetFD runs "getfd" {"fdname": name} with f's descriptor sent along
// (SCM_RIGHTS): QEMU keeps a duplicate under name, for later commands that
// name it (a migration "fd:NAME" URI, a chardev, a netdev). A second getfd
// with the same name replaces the first. f stays the caller's.
func (m *Monitor) GetFD(ctx context.Context, name string, f *os.File) error {
	args := struct {
		FDName string `json:"fdname"`
	}{name}
	return m.ExecuteFiles(ctx, "getfd", args, []*os.File{f}, nil)
}

// CloseFD runs "closefd" {"fdname": name}: QEMU closes the descriptor it
// got by GetFD under name.
func (m *Monitor) CloseFD(ctx context.Context, name string) error {
	args := struct {
		FDName string `json:"fdname"`
	}{name}
	return m.Execute(ctx, "closefd", args, nil)
}

// DeviceAdd runs "device_add": {"driver": driver, "id": id, PROPS...}, the
// device's properties flattened beside driver and id as QEMU takes them
// (values are strings, numbers or booleans: "bus", "addr", "chardev", ...).
// id "" lets QEMU choose none. props must not name driver or id.
func (m *Monitor) DeviceAdd(ctx context.Context, driver, id string, props map[string]any) error {
	args, err := DeviceAddArgs(driver, id, props)
	if err != nil {
		return err
	}
	return m.Execute(ctx, "device_add", args, nil)
}

// DeviceAddArgs are device_add's arguments: props flattened beside driver
// and id ("" for none), as QEMU takes them; props must not name driver or
// id. (For whatever else carries QMP commands, such as virsh.)
func DeviceAddArgs(driver, id string, props map[string]any) (map[string]any, error) {
	args := make(map[string]any, len(props)+2)
	for k, v := range props {
		if k == "driver" || k == "id" {
			return nil, fmt.Errorf("qmp device_add: property %q given in props", k)
		}
		args[k] = v
	}
	args["driver"] = driver
	if id != "" {
		args["id"] = id
	}
	return args, nil
}

// DeviceDel runs "device_del" {"id": id}: ask for the device's removal.
// For a hot-pluggable device on a PCI bus the guest must agree first; the
// device is gone when QEMU sends DEVICE_DELETED (WaitDeviceDeleted). An id
// QEMU does not know is an *Error of class DeviceNotFound
// (ErrDeviceNotFound).
func (m *Monitor) DeviceDel(ctx context.Context, id string) error {
	args := struct {
		ID string `json:"id"`
	}{id}
	return m.Execute(ctx, "device_del", args, nil)
}

// WaitDeviceDeleted waits for the event DEVICE_DELETED whose data.device is
// id. QEMU also sends DEVICE_DELETED with only data.path for devices that
// have no id, such as a virtio proxy's backend; those are left alone. A
// buffered event counts, so a removal that finished before the call is
// found.
func (m *Monitor) WaitDeviceDeleted(ctx context.Context, id string) error {
	_, err := m.WaitEvent(ctx, "DEVICE_DELETED", func(ev Event) bool {
		var data struct {
			Device string `json:"device"`
		}
		return json.Unmarshal(ev.Data, &data) == nil && data.Device == id
	})
	return err
}
