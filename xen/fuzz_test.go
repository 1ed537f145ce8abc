package xen_test

import (
	"errors"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/xen"
	"github.com/vgpud/vgpud/xen/xentest"
)

// FuzzIoreq writes arbitrary slot contents, as a broken Xen might, into a
// vCPU slot of a live server. The server must answer or stop with
// ErrProtocol, never crash or hang; if it answered, it must still serve.
func FuzzIoreq(f *testing.F) {
	f.Add(uint64(xentest.BAR0Addr), uint64(0), uint32(1), uint32(4), uint8(xen.StateReady), false, uint8(xen.IOReqRead), false, uint8(xen.TypeCopy), false)
	f.Add(uint64(xentest.BAR0Addr+abi.RegIntEnable), uint64(xentest.HighRAM), uint32(3), uint32(4), uint8(xen.StateReady), true, uint8(xen.IOReqWrite), true, uint8(xen.TypeCopy), false)
	f.Add(uint64(xentest.DefaultSBDF.Uint32())<<32|4, uint64(6), uint32(1), uint32(2), uint8(xen.StateReady), false, uint8(xen.IOReqWrite), false, uint8(xen.TypePCIConfig), false)
	f.Add(uint64(0), uint64(0), uint32(0xffffffff), uint32(8), uint8(9), false, uint8(0), false, uint8(xen.TypeInvalidate), true)
	f.Fuzz(func(t *testing.T, addr, data uint64, count, size uint32, state uint8, ptr bool, dir uint8, df bool, typ uint8, badPort bool) {
		r := newRig(t)
		g, stop, err := xentest.Attach(r.dev(), xentest.MinRAM)
		if err != nil {
			t.Fatal(err)
		}
		req := xen.IOReq{Addr: addr, Data: data, Count: count, Size: size, State: state & 0xf, DataIsPtr: ptr, Dir: dir & 1, DF: df, Type: typ}
		if badPort {
			req.VPEport = 9999
		}
		if req.State != xen.StateReady {
			// Not READY: the server ignores a stray event or stops; the
			// access does not wait for an answer that never comes.
			req.State = xen.StateNone
		}
		if req.State == xen.StateReady {
			if _, err := g.IO(req, true); err != nil && !errors.Is(err, xentest.ErrServerGone) {
				t.Fatalf("%v: %v", req, err)
			}
		} else {
			g.Hypervisor().Signal(0)
		}
		// The request may have moved BAR0 or turned decoding off:
		// program it again, as firmware would.
		g.ConfigWrite(mmio.CfgBAR0, 4, xentest.BAR0Addr)
		g.ConfigWrite(mmio.CfgCommand, 2, mmio.CmdMemorySpace|mmio.CmdBusMaster)
		if v := g.Read32(abi.RegID); v != abi.IDMagic {
			// Only a server that stopped may fail to answer.
			if err := g.Hypervisor().WaitServerGone(wait); err != nil {
				t.Errorf("after %v: RegID = %#x (%v) from a server still running", req, v, g.Err())
			}
		}
		if err := stop(); err != nil && !errors.Is(err, xen.ErrProtocol) {
			t.Errorf("after %v: Serve = %v", req, err)
		}
	})
}
