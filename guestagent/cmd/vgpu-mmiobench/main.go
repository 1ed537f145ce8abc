// Command vgpu-mmiobench runs inside the test guest and times trapped
// 32-bit MMIO accesses to BAR0 of a PCI device (docs/guest-image.md):
//
//	vgpu-mmiobench -dev 1234:11e8 [-n 2000]   # QEMU's -device edu
//	vgpu-mmiobench -dev 7667:0001             # the vGPU
//	vgpu-mmiobench -dev 1234:11e8 -dev 7667:0001   # both, in that order
//
// For each -dev in turn, it finds the device in sysfs by vendor:device,
// enables it, mmaps resource0, checks the identification register, then
// times n writes to a register where writes are harmless (edu: the liveness register 0x04;
// vGPU: abi.RegErrorAck) and n reads of the identification register. It
// prints one line per operation:
//
//	VGPU-MMIOBENCH {"device":"1234:11e8","bdf":"0000:00:03.0","op":"write",...}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// Marker prefixes each result line.
const Marker = "VGPU-MMIOBENCH "

// target says where on a known device accesses are harmless.
type target struct {
	writeOff uint32               // register written in the write benchmark
	readOff  uint32               // identification register, read in the read benchmark
	idOK     func(id uint32) bool // checks the identification register
	idWant   string               // idOK in words, for the error
}

// targets maps vendor:device to its benchmark registers.
var targets = map[[2]uint16]target{
	// QEMU's edu device, docs/specs/edu.rst: 0x00 identification
	// 0xRRrr00ed, 0x04 liveness check (stores the inverse of what is
	// written; no side effect).
	{0x1234, 0x11e8}: {writeOff: 0x04, readOff: 0x00,
		idOK: func(id uint32) bool { return id&0xffff == 0x00ed }, idWant: "0xRRrr00ed"},
	// The vGPU: RegErrorAck takes any write and only clears a latched
	// error.
	{abi.VendorID, abi.DeviceID}: {writeOff: abi.RegErrorAck, readOff: abi.RegID,
		idOK: func(id uint32) bool { return id == abi.IDMagic }, idWant: fmt.Sprintf("%#x", abi.IDMagic)},
}

// Result is one benchmark line.
type Result struct {
	Device  string  `json:"device"` // vendor:device
	BDF     string  `json:"bdf"`
	Op      string  `json:"op"` // "write" or "read"
	Offset  uint32  `json:"offset"`
	N       int     `json:"n"`
	TotalNS int64   `json:"total_ns"`
	NSPerOp float64 `json:"ns_per_op"`
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "vgpu-mmiobench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-mmiobench", flag.ContinueOnError)
	var devs devList
	fs.Var(&devs, "dev", "PCI `vendor:device` in hex, e.g. 1234:11e8; repeat to time several devices in turn")
	n := fs.Int("n", 2000, "accesses per operation")
	sysfs := fs.String("sysfs", "/sys", "sysfs mount `dir`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(devs) == 0 {
		return errors.New("no -dev given")
	}
	if *n <= 0 || *n > 100_000_000 {
		return fmt.Errorf("-n %d: want 1..100000000", *n)
	}
	ids := make([][2]uint16, len(devs))
	for i, dev := range devs {
		id, err := parseID(dev)
		if err != nil {
			return err
		}
		if _, ok := targets[id]; !ok {
			return fmt.Errorf("-dev %s: no known harmless register on this device (known: edu 1234:11e8, vGPU %04x:%04x)",
				dev, abi.VendorID, abi.DeviceID)
		}
		ids[i] = id
	}
	for _, id := range ids {
		if err := benchDevice(ctx, *sysfs, id, *n, stdout); err != nil {
			return err
		}
	}
	return nil
}

// devList collects repeated -dev flags.
type devList []string

func (l *devList) String() string { return strings.Join(*l, ",") }

func (l *devList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// benchDevice times n writes and n reads on the device id and prints one
// result line per operation.
func benchDevice(ctx context.Context, sysfs string, id [2]uint16, n int, stdout io.Writer) error {
	tgt := targets[id]
	bdf, err := findDevice(sysfs, id)
	if err != nil {
		return err
	}
	bar, err := openBAR0(sysfs, bdf)
	if err != nil {
		return err
	}
	defer bar.Close()
	if tgt.writeOff+4 > uint32(len(bar.mem)) || tgt.readOff+4 > uint32(len(bar.mem)) {
		return fmt.Errorf("%s: BAR0 is %d bytes, too small", bdf, len(bar.mem))
	}
	if got := bar.Read32(tgt.readOff); !tgt.idOK(got) {
		return fmt.Errorf("%s: identification register %#x = %#x, want %s", bdf, tgt.readOff, got, tgt.idWant)
	}

	name := fmt.Sprintf("%04x:%04x", id[0], id[1])
	results := []Result{
		{Device: name, BDF: bdf, Op: "write", Offset: tgt.writeOff, N: n},
		{Device: name, BDF: bdf, Op: "read", Offset: tgt.readOff, N: n},
	}
	for i := range results {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &results[i]
		start := time.Now()
		if r.Op == "write" {
			for j := range n {
				bar.Write32(r.Offset, uint32(j))
			}
		} else {
			for range n {
				bar.Read32(r.Offset)
			}
		}
		r.TotalNS = time.Since(start).Nanoseconds()
		r.NSPerOp = float64(r.TotalNS) / float64(n)
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "%s%s\n", Marker, b); err != nil {
			return err
		}
	}
	return nil
}

// parseID parses "vvvv:dddd" (hex).
func parseID(s string) ([2]uint16, error) {
	v, d, ok := strings.Cut(s, ":")
	if !ok {
		return [2]uint16{}, fmt.Errorf("-dev %q: want vendor:device in hex", s)
	}
	vendor, err1 := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 16)
	device, err2 := strconv.ParseUint(strings.TrimPrefix(d, "0x"), 16, 16)
	if err := errors.Join(err1, err2); err != nil {
		return [2]uint16{}, fmt.Errorf("-dev %q: %w", s, err)
	}
	return [2]uint16{uint16(vendor), uint16(device)}, nil
}
