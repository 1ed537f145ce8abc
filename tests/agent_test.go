package tests

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/guestagent/syncjob"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

var (
	syncOnce sync.Once
	syncRD   string
)

// syncGuest returns an initramfs with vgpu-agent and vgpu-sync.
func syncGuest(t *testing.T) (imagetest.Kernel, string) {
	t.Helper()
	k := imagetest.RequireKernel(t)
	syncOnce.Do(func() {
		syncRD = sharedInitramfs(t, k, "vgpud-agent-",
			"github.com/vgpud/vgpud/guestagent/cmd/vgpu-agent", "github.com/vgpud/vgpud/guestagent/cmd/vgpu-sync")
	})
	if syncRD == "" {
		t.Fatal("initramfs build failed earlier")
	}
	return k, syncRD
}

// bootSyncGuest boots syncGuest's initramfs on the vGPU at sock with the
// kernel command line's vgpu.* arguments args (and the agent's socket,
// if any); the VM is killed, and the returned context (bounded by
// vmTimeout) cancelled, when the test ends.
func bootSyncGuest(t *testing.T, sock, args, agentSocket string) (context.Context, *qemuvm.VM) {
	t.Helper()
	k, initrd := syncGuest(t)
	ctx, cancel := context.WithTimeout(t.Context(), vmTimeout)
	t.Cleanup(cancel)
	vm, err := bootVGPU(ctx, sock, qemuvm.Config{
		Kernel: k.Vmlinuz, Initrd: initrd, MemMiB: 512, Append: args, AgentSocket: agentSocket,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return ctx, vm
}

// syncResult waits for vgpu-sync's next result line on vm's console.
func syncResult(ctx context.Context, t *testing.T, vm *qemuvm.VM) syncjob.Result {
	t.Helper()
	line, err := vm.WaitLine(ctx, syncjob.LinePrefix+"{")
	if err != nil {
		t.Fatalf("no result line: %v\nconsole:\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	var r syncjob.Result
	_, js, _ := strings.Cut(line, syncjob.LinePrefix)
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("result line %q: %v", line, err)
	}
	return r
}

// TestGuestBlocksThroughAgent: a guest runs vgpu-agent, which owns the
// virtio-serial port and runs vgpu-sync; vgpu-sync waits for its kernels
// with Block and Hybrid, woken through the relay and the host's agent
// channel. On both transports: QEMU 11.1 spells the chardev's reconnect
// its own way, and vgpud finds the VM's vCPUs and RAM for placement in a
// QEMU run from the VMM root.
func TestGuestBlocksThroughAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	for _, tt := range qemuTransports {
		t.Run(tt.name, func(t *testing.T) { guestBlocksThroughAgent(t, hostOn(t, tt.tr)) })
	}
}

func guestBlocksThroughAgent(t *testing.T, m *mdev.Manager) {
	inst := mustCreate(t, m, "vgpu-small")
	if inst.AgentSocket() == "" {
		t.Fatal("instance has no agent socket")
	}
	ctx, vm := bootSyncGuest(t, inst.Socket(),
		"vgpu.run=vgpu-agent vgpu.args=-stats,100ms,/bin/vgpu-sync,-agent,relay,-modes,block+hybrid,-steps,40", inst.AgentSocket())
	results := map[string]syncjob.Result{}
	for len(results) < 2 {
		r := syncResult(ctx, t, vm)
		results[r.Mode] = r
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\nconsole:\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	t.Logf("guest results: %+v", results)
	b, h := results["block"], results["hybrid"]
	if b.Steps != 40 || b.Blocked == 0 {
		t.Errorf("block: %+v, want 40 steps, some blocked through the agent", b)
	}
	if h.Steps != 40 || h.Polled+h.Blocked != 40 {
		t.Errorf("hybrid: %+v, want 40 steps", h)
	}
	if b.Checksum == 0 || h.Checksum == 0 {
		t.Errorf("kernels left no result: block %#x, hybrid %#x", b.Checksum, h.Checksum)
	}
	a := inst.Agent()
	if st := a.Stats(); st.Watches.Load() == 0 || st.Wakeups.Load() == 0 {
		t.Errorf("host agent channel: %d watches, %d wakeups; want some of each", st.Watches.Load(), st.Wakeups.Load())
	}
	if gs, ok := a.GuestStats(); !ok || gs.User+gs.System+gs.Idle == 0 {
		t.Errorf("host got no guest stats: %+v, %v", gs, ok)
	}
	// The placement features see the real VM: its vCPUs and their load
	// (the agent's reports), its RAM (QEMU's memory map), its kernels.
	feat := inst.Features()
	t.Logf("placement features: %+v", feat)
	if feat.VCPUs < 1 || feat.VCPUUtil <= 0 || feat.VCPUUtil > 1 || feat.VMMemGiB <= 0 || feat.VMMemGiB > 0.5 || feat.KernelMeanMs <= 0 || feat.LaunchesPerSec <= 0 {
		t.Errorf("placement features of a real VM: %+v", feat)
	}
	if err := vm.Wait(); err != nil {
		t.Errorf("qemu: %v", err)
	}
}
