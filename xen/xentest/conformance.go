package xentest

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/xen"
)

// Conformance is the Xen ioreq-server transport as the conformance suite
// (transporttest.Run) sees it: each guest is a fake domain whose
// xen.Server is attached to the instance with mdev.Instance.Attach.
type Conformance struct{}

var _ transporttest.Transport = Conformance{}

// vcpus is the fake domains' vCPU count: two, so accesses from several
// goroutines use different slots.
const vcpus = 2

// Name is "xen".
func (Conformance) Name() string { return "xen" }

// Socket is nil: a Xen server owns its event loop.
func (Conformance) Socket() transport.Socket { return nil }

// start attaches a new fake domain to inst.
func start(t testing.TB, inst *mdev.Instance, ramBytes uint64) *Session {
	t.Helper()
	s, err := Start(ramBytes, vcpus, inst.Endpoint(), func(srv *xen.Server) error {
		return inst.Attach(context.Background(), srv)
	})
	if err != nil {
		t.Fatalf("xen attach: %v", err)
	}
	t.Cleanup(func() {
		s.H.Close()
		if err := s.Wait(StartTimeout); err != nil && !errors.Is(err, xen.ErrProtocol) {
			t.Errorf("xen server: %v", err)
		}
	})
	return s
}

// Attach attaches a fake domain with ramBytes of RAM to inst, probes and
// programs the vGPU's config space through it.
func (Conformance) Attach(t testing.TB, inst *mdev.Instance, ramBytes uint64) transporttest.Guest {
	t.Helper()
	s := start(t, inst, ramBytes)
	g, err := NewGuest(s.H, DefaultSBDF)
	if err != nil {
		t.Fatalf("xen guest: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// attackRAM is the RAM of an attacker's domain.
const attackRAM = 8 << 20

// Hostile returns the attacks of a broken or malicious hypervisor on the
// ioreq pages and event channels (the guest itself cannot write them).
// Each either expects the server to answer and keep serving, or to stop
// with an error wrapping xen.ErrProtocol; the domain is destroyed after.
func (Conformance) Hostile() []transporttest.Attack {
	bar := uint64(BAR0Addr)
	read := func(addr uint64, size, count uint32) xen.IOReq {
		return xen.IOReq{Type: xen.TypeCopy, Addr: addr, Size: size, Count: count, Dir: xen.IOReqRead, State: xen.StateReady}
	}
	other := xen.SBDF{Dev: DefaultSBDF.Dev + 1}
	return []transporttest.Attack{
		stops("bad-size", func(g *Guest) { g.IO(read(bar, 3, 1), true) }),
		stops("size-16", func(g *Guest) { g.IO(read(bar, 16, 1), true) }),
		stops("unknown-type", func(g *Guest) {
			r := read(bar, 4, 1)
			r.Type = 5
			g.IO(r, true)
		}),
		stops("port-io", func(g *Guest) {
			r := read(0xcfc, 4, 1)
			r.Type = xen.TypePIO
			g.IO(r, true)
		}),
		stops("state-garbage", func(g *Guest) {
			r := read(bar, 4, 1)
			r.State = 9
			g.IO(r, true)
		}),
		stops("vp-eport-mismatch", func(g *Guest) {
			r := read(bar, 4, 1)
			r.VPEport = 4242
			g.IO(r, true)
		}),
		stops("pci-config-other-sbdf", func(g *Guest) {
			r := read(uint64(other.Uint32())<<32, 4, 1)
			r.Type = xen.TypePCIConfig
			g.IO(r, true)
		}),
		stops("buffered-pointer-jump", func(g *Guest) {
			rd, _, _ := g.h.BufferedPointers()
			g.h.Buffered(nil, &[2]uint32{rd, rd + 600})
		}),
		stops("buffered-read", func(g *Guest) {
			g.h.Buffered([]xen.BufIOReq{{Type: xen.TypeCopy, Dir: xen.IOReqRead, Size: 2, Addr: 0x1000}}, nil)
		}),
		stops("buffered-half-qword", func(g *Guest) {
			g.h.Buffered([]xen.BufIOReq{{Type: xen.TypeCopy, Size: 3, Addr: 0x1000, Data: 1}}, nil)
		}),
		answers("huge-count", func(t testing.TB, g *Guest) {
			expectOnes(t, g, read(bar, 4, 0xffffffff))
		}),
		answers("huge-count-down", func(t testing.TB, g *Guest) {
			r := read(bar+abi.BAR0Size-4, 4, 0x80000000)
			r.DF = true
			expectOnes(t, g, r)
		}),
		answers("outside-bar0", func(t testing.TB, g *Guest) {
			expectOnes(t, g, read(0xfee00000, 4, 1))
		}),
		answers("rep-ptr-outside-ram", func(t testing.TB, g *Guest) {
			r := xen.IOReq{Type: xen.TypeCopy, Addr: bar + abi.RegIntEnable, Data: 1 << 40, Size: 4, Count: 1, DataIsPtr: true, Dir: xen.IOReqWrite, State: xen.StateReady}
			if _, err := g.IO(r, true); err != nil {
				t.Errorf("rep write from outside RAM: %v", err)
			}
			r.Data, r.Count = LowRAMEnd, 4 // the VGA hole
			if _, err := g.IO(r, true); err != nil {
				t.Errorf("rep write from the VGA hole: %v", err)
			}
			if v := g.Read32(abi.RegIntEnable); v != 0 {
				t.Errorf("RegIntEnable = %#x after rep writes from outside RAM, want 0", v)
			}
		}),
		answers("config-rep", func(t testing.TB, g *Guest) {
			r := read(uint64(DefaultSBDF.Uint32())<<32, 4, 2)
			r.Type = xen.TypePCIConfig
			expectOnes(t, g, r)
		}),
		answers("spurious-event", func(t testing.TB, g *Guest) {
			g.h.Signal(0)
			g.h.Signal(1)
		}),
	}
}

// stops is an attack after which the server must stop with ErrProtocol.
func stops(name string, attack func(g *Guest)) transporttest.Attack {
	return transporttest.Attack{Name: name, Run: func(t testing.TB, inst *mdev.Instance) {
		t.Helper()
		s := start(t, inst, attackRAM)
		g, err := NewGuest(s.H, DefaultSBDF)
		if err != nil {
			t.Fatalf("xen guest: %v", err)
		}
		defer g.Close()
		attack(g)
		if err := s.Wait(StartTimeout); !errors.Is(err, xen.ErrProtocol) {
			t.Errorf("%s: server returned %v, want an error wrapping ErrProtocol", name, err)
		}
		if err := s.H.WaitServerGone(StartTimeout); err != nil {
			t.Errorf("%s: the ioreq server was not destroyed: %v", name, err)
		}
	}}
}

// answers is an attack the server must answer and survive: a register
// read afterwards still works, and the domain's end detaches it cleanly.
func answers(name string, attack func(t testing.TB, g *Guest)) transporttest.Attack {
	return transporttest.Attack{Name: name, Run: func(t testing.TB, inst *mdev.Instance) {
		t.Helper()
		s := start(t, inst, attackRAM)
		g, err := NewGuest(s.H, DefaultSBDF)
		if err != nil {
			t.Fatalf("xen guest: %v", err)
		}
		attack(t, g)
		if v := g.Read32(abi.RegID); v != abi.IDMagic {
			t.Errorf("%s: RegID afterwards = %#x (%v), want %#x", name, v, g.Err(), abi.IDMagic)
		}
		g.Close()
		if err := s.Wait(StartTimeout); err != nil {
			t.Errorf("%s: server returned %v after the domain went, want nil", name, err)
		}
	}}
}

func expectOnes(t testing.TB, g *Guest, r xen.IOReq) {
	t.Helper()
	v, err := g.IO(r, true)
	if err != nil || v != ^uint64(0) {
		t.Errorf("%v answered %#x, %v; want all ones", r, v, err)
	}
}
