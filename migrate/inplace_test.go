package migrate_test

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
	"github.com/vgpud/vgpud/migrate/migratetest"
	"github.com/vgpud/vgpud/migrate/qmp/qmptest"
	"github.com/vgpud/vgpud/migrate/stream"
)

// destinationVFIOUser is destinationOn a manager whose VMMs speak
// vfio-user (they keep the vGPU attached through QEMU's migration).
func destinationVFIOUser(t *testing.T, tlsDir string) (*mdev.Manager, *qmptest.Server, string) {
	t.Helper()
	return destinationOn(t, tlsDir, vfiouser.Transport{})
}

// sendInstance writes the stream of a migration with no buffers: Instance,
// the ring, the final round. A destination that refuses the instance
// closes the connection, which can fail the later writes.
func sendInstance(c io.Writer, profile string) error {
	w := stream.NewWriter(c)
	for _, rec := range []stream.Record{
		&stream.Instance{ID: testID, Profile: profile, MemBytes: 256 << 20},
		&stream.Ring{},
		&stream.Round{Number: 0, Final: true},
	} {
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	return w.Close()
}

// TestDestinationInPlace: onto a vfio-user daemon a migration fills only
// an instance created to await it, to which the destination QEMU is
// attached; nothing is plugged at commit, and the VM runs on go. Any other
// instance of the UUID is refused and left as it was.
func TestDestinationInPlace(t *testing.T) {
	ca := migratetest.NewCA(t)
	m, q, addr := destinationVFIOUser(t, ca.HostDir(t))
	status := fakeQEMU(q)
	refused := func(t *testing.T, want string) {
		t.Helper()
		c := dial(t, addr, ca.HostDir(t))
		_ = sendInstance(c, "vgpu-small") // the refusal is in the reply
		if rep := reply(t, bufio.NewReader(c)); rep.Step != "instance" || !strings.Contains(rep.Error, want) {
			t.Fatalf("instance step: %+v, want an error containing %q", rep, want)
		}
	}

	t.Run("nothing awaits", func(t *testing.T) {
		refused(t, "create it first")
	})
	t.Run("an instance not created to await", func(t *testing.T) {
		inst, err := m.Create(mdev.CreateRequest{UUID: testID, Profile: "vgpu-small"})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, "not awaiting this migration")
		if got, err := m.Get(testID); err != nil || got != inst {
			t.Errorf("the instance the migration named: %v, %v; want it untouched", got, err)
		}
		if err := m.Destroy(testID); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("another profile", func(t *testing.T) {
		if _, err := m.Create(mdev.CreateRequest{UUID: testID, Profile: "vgpu-medium", Incoming: true}); err != nil {
			t.Fatal(err)
		}
		refused(t, "has profile vgpu-medium")
		if err := m.Destroy(testID); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("in place", func(t *testing.T) {
		inst, err := m.Create(mdev.CreateRequest{UUID: testID, Profile: "vgpu-small", Incoming: true})
		if err != nil {
			t.Fatal(err)
		}
		if !inst.Awaiting() {
			t.Fatalf("an instance created with Incoming does not await")
		}
		// The destination QEMU's vfio-user-pci connects at its start.
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		vm, err := vfiousertest.New(conn, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer vm.Close()
		for deadline := time.Now().Add(30 * time.Second); !inst.Attached(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the VMM is not attached")
			}
		}
		c := dial(t, addr, ca.HostDir(t))
		r := bufio.NewReader(c)
		if err := sendInstance(c, "vgpu-small"); err != nil {
			t.Fatal(err)
		}
		if rep := reply(t, r); rep.Step != "instance" || rep.Error != "" || !rep.KeepsDevice {
			t.Fatalf("instance step: %+v, want it filled and keeps_device", rep)
		}
		if inst.Awaiting() {
			t.Errorf("the instance still awaits once claimed")
		}
		if rep := reply(t, r); rep.Step != "round" || rep.Error != "" {
			t.Fatalf("final round: %+v", rep)
		}
		status.Store("paused") // QEMU received the VM (-S)
		if _, err := c.Write([]byte(`{"do":"commit","device_id":"vgpu0","slot":5,"in_place":true}` + "\n")); err != nil {
			t.Fatal(err)
		}
		if rep := reply(t, r); rep.Step != "commit" || rep.Error != "" {
			t.Fatalf("commit: %+v", rep)
		}
		if cmds := names(q.Commands()); slices.Contains(cmds, "device_add") || slices.Contains(cmds, "cont") {
			t.Fatalf("after an in-place commit QEMU was told %q: want no device_add, no cont", cmds)
		}
		if _, err := c.Write([]byte(`{"do":"go"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		if rep := reply(t, r); rep.Step != "go" || rep.Error != "" {
			t.Fatalf("go: %+v", rep)
		}
		if got, err := m.Get(testID); err != nil || got != inst {
			t.Errorf("after go the instance is %v, %v; want the one that awaited", got, err)
		}
		if !slices.Contains(names(q.Commands()), "cont") {
			t.Errorf("after go QEMU was told %q: want cont", names(q.Commands()))
		}
		if !inst.Attached() {
			t.Errorf("the VMM was detached by the migration")
		}
	})
}
