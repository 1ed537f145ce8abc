package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

// eduID is QEMU's educational device, emulated inside QEMU itself.
const eduID = "1234:11e8"

// vgpuID is the vGPU's vendor:device.
var vgpuID = fmt.Sprintf("%04x:%04x", abi.VendorID, abi.DeviceID)

// mmioCost is one row: nanoseconds per write and per read (0: not measured).
type mmioCost struct{ write, read float64 }

func (b *bench) mmioTable(ctx context.Context) (*table.Table, error) {
	t := &table.Table{
		Title:  "MMIO cost: one 32-bit BAR0 register access, ns/op (ratio to the same access to QEMU's edu device)",
		Header: []string{"path", "write ns/op", "read ns/op", "write vs edu", "read vs edu"},
	}
	var edu, proxy, edu11, vfioUser mmioCost
	if b.guest != nil {
		var err error
		if edu, proxy, err = b.guestMMIO(ctx); err != nil {
			return nil, err
		}
		if b.vfioUser != nil {
			if edu11, vfioUser, err = b.guestMMIOVFIOUser(ctx); err != nil {
				return nil, err
			}
		}
	}
	harness, err := b.harnessMMIO()
	if err != nil {
		return nil, err
	}
	row := func(name string, c mmioCost) {
		t.Add(name, nsCell(c.write), nsCell(c.read), ratioCell(c.write, edu.write), ratioCell(c.read, edu.read))
	}
	if b.guest != nil {
		row("edu, emulated in QEMU (guest, TCG)", edu)
		row("vGPU via x-pci-proxy-dev (guest, TCG)", proxy)
		if b.vfioUser != nil {
			// Against QEMU 11.1's own edu: each QEMU's emulation is its
			// own baseline.
			t.Add("edu, emulated in QEMU 11.1 (guest, TCG)", nsCell(edu11.write), nsCell(edu11.read), ratioCell(edu11.write, edu11.write), ratioCell(edu11.read, edu11.read))
			t.Add("vGPU via vfio-user-pci (QEMU 11.1 guest, TCG)", nsCell(vfioUser.write), nsCell(vfioUser.read), ratioCell(vfioUser.write, edu11.write), ratioCell(vfioUser.read, edu11.read))
		}
	}
	row("vGPU via harness (host process, no QEMU)", harness)
	if b.guest != nil {
		t.Note("guest: vgpu-mmiobench -dev %s -dev %s -n %d in one TCG guest; write = edu 0x04 / vGPU RegErrorAck, read = the ID register",
			eduID, vgpuID, b.cfg.guestMMIO)
	} else {
		t.Note("no guest rows (-qemu=false): no edu baseline")
	}
	if b.vfioUser != nil {
		t.Note("QEMU 11.1 rows: the same program on QEMU 11.1 from the VMM root, vgpud's vfio-user server; their ratios are to QEMU 11.1's edu")
		t.Note("guest-seen vGPU write, vfio-user-pci (QEMU 11.1) / x-pci-proxy-dev (QEMU 7.2): %s; read: %s",
			ratioCell(vfioUser.write, proxy.write), ratioCell(vfioUser.read, proxy.read))
	} else if b.guest != nil {
		t.Note("no QEMU 11.1 rows: no VMM root (make vmm-root)")
	}
	t.Note("harness: %d accesses each through mpqemutest (BAR_WRITE/BAR_READ messages on the instance socket)", b.cfg.harnessMMIO)
	return t, nil
}

// mmioLine is vgpu-mmiobench's result line.
type mmioLine struct {
	Device  string  `json:"device"`
	Op      string  `json:"op"`
	N       int     `json:"n"`
	NSPerOp float64 `json:"ns_per_op"`
}

// guestMMIO boots one guest with edu and a vGPU and times both.
func (b *bench) guestMMIO(ctx context.Context) (edu, proxy mmioCost, err error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return edu, proxy, err
	}
	defer func() { err = errors.Join(err, destroy()) }()
	raw, err := b.boot(ctx, inst, guestRun{
		prog:   "vgpu-mmiobench",
		args:   []string{"-dev", eduID, "-dev", vgpuID, "-n", strconv.Itoa(b.cfg.guestMMIO)},
		extra:  []string{"edu"},
		marker: "VGPU-MMIOBENCH ",
		lines:  4,
	})
	if err != nil {
		return edu, proxy, err
	}
	return parseMMIO(raw, b.cfg.guestMMIO)
}

// guestMMIOVFIOUser is guestMMIO on QEMU 11.1 from the VMM root, the vGPU
// attached by vfio-user-pci to an instance of the vfio-user manager.
func (b *bench) guestMMIOVFIOUser(ctx context.Context) (edu, vgpu mmioCost, err error) {
	inst, err := b.vfioUser.Create(mdev.CreateRequest{Profile: b.cfg.profile})
	if err != nil {
		return edu, vgpu, err
	}
	defer func() { err = errors.Join(err, b.vfioUser.Destroy(inst.UUID())) }()
	raw, err := b.bootOn(ctx, inst, guestRun{
		prog:   "vgpu-mmiobench",
		args:   []string{"-dev", eduID, "-dev", vgpuID, "-n", strconv.Itoa(b.cfg.guestMMIO)},
		extra:  []string{"edu"},
		marker: "VGPU-MMIOBENCH ",
		lines:  4,
	}, b.root)
	if err != nil {
		return edu, vgpu, err
	}
	return parseMMIO(raw, b.cfg.guestMMIO)
}

// parseMMIO sorts vgpu-mmiobench's lines into the edu and vGPU costs; each
// must have run n accesses, and both operations of both devices must be
// there.
func parseMMIO(raw []json.RawMessage, n int) (edu, proxy mmioCost, err error) {
	for _, r := range raw {
		var l mmioLine
		if err := json.Unmarshal(r, &l); err != nil {
			return edu, proxy, fmt.Errorf("decode %s: %w", r, err)
		}
		if l.N != n || l.NSPerOp <= 0 {
			return edu, proxy, fmt.Errorf("guest result %s: want n %d and a positive time", r, n)
		}
		var c *mmioCost
		switch l.Device {
		case eduID:
			c = &edu
		case vgpuID:
			c = &proxy
		default:
			return edu, proxy, fmt.Errorf("guest result %s: unexpected device", r)
		}
		switch l.Op {
		case "write":
			c.write = l.NSPerOp
		case "read":
			c.read = l.NSPerOp
		default:
			return edu, proxy, fmt.Errorf("guest result %s: unexpected op", r)
		}
	}
	if edu.write == 0 || edu.read == 0 || proxy.write == 0 || proxy.read == 0 {
		return edu, proxy, fmt.Errorf("guest results %s: want a write and a read for each device", raw)
	}
	return edu, proxy, nil
}

// attachHarness connects a QEMU-less VM with ramBytes of RAM to inst.
func attachHarness(inst *mdev.Instance, ramBytes uint64) (*mpqemutest.VM, error) {
	vm, err := mpqemutest.Dial(inst.Socket(), ramBytes)
	if err != nil {
		return nil, fmt.Errorf("attach harness: %w", err)
	}
	return vm, nil
}

// harnessMMIO times the same registers as vgpu-mmiobench through the
// harness.
func (b *bench) harnessMMIO() (_ mmioCost, err error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return mmioCost{}, err
	}
	defer func() { err = errors.Join(err, destroy()) }()
	vm, err := attachHarness(inst, 16<<20)
	if err != nil {
		return mmioCost{}, err
	}
	defer vm.Close()
	if id := vm.Read32(abi.RegID); id != abi.IDMagic {
		return mmioCost{}, fmt.Errorf("harness: ID register = %#x, want %#x", id, abi.IDMagic)
	}
	n := b.cfg.harnessMMIO
	var c mmioCost
	start := time.Now()
	for i := range n {
		vm.Write32(abi.RegErrorAck, uint32(i))
	}
	c.write = float64(time.Since(start).Nanoseconds()) / float64(n)
	start = time.Now()
	var last uint32
	for range n {
		last = vm.Read32(abi.RegID)
	}
	c.read = float64(time.Since(start).Nanoseconds()) / float64(n)
	// A broken connection reads as all ones instead of failing: check
	// the transport and the last value read.
	if err := vm.Err(); err != nil {
		return mmioCost{}, fmt.Errorf("harness: %w", err)
	}
	if last != abi.IDMagic {
		return mmioCost{}, fmt.Errorf("harness: ID register read %#x after the benchmark, want %#x", last, abi.IDMagic)
	}
	return c, nil
}
