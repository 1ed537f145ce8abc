package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/xen"
	"github.com/vgpud/vgpud/xen/xentest"
)

// TestXenAttach runs the operator's Xen attach (what POST
// /v1/instances/{uuid}/xen calls) against the fake Xen: the attach
// returns once the ioreq server serves, the guest computes through it,
// a second attach is refused, a bad slot and a dead domain are clear
// errors, and destroying the instance ends the session.
func TestXenAttach(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	dev, err := gpu.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := xentest.New(64<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	xa := newXenAttacher(ctx, m, log)
	xa.open = func() (xen.Hypervisor, error) { return h, nil }
	defer func() { cancel(); xa.Wait() }()

	req := control.XenAttachRequest{Domain: uint32(h.Domain()), PCI: xentest.DefaultSBDF.String()}
	if err := xa.AttachXen(ctx, "no-such", req); !errors.Is(err, mdev.ErrNotFound) {
		t.Errorf("attach of an unknown instance = %v, want ErrNotFound", err)
	}
	if err := xa.AttachXen(ctx, inst.UUID(), control.XenAttachRequest{Domain: req.Domain, PCI: "00:40.0"}); err == nil {
		t.Error("attach at slot 0x40 (> 31) succeeded")
	}
	// A domain that does not exist (each attach opens its own handle,
	// restricted to the domain: this one a fresh fake Xen).
	other, err := xentest.New(16<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	xa.open = func() (xen.Hypervisor, error) { return other, nil }
	if err := xa.AttachXen(ctx, inst.UUID(), control.XenAttachRequest{Domain: uint32(other.Domain()) + 100, PCI: req.PCI}); err == nil || inst.Attached() {
		t.Errorf("attach to a domain that does not exist = %v (attached %v), want an error", err, inst.Attached())
	}
	xa.open = func() (xen.Hypervisor, error) { return h, nil }
	if err := xa.AttachXen(ctx, inst.UUID(), req); err != nil {
		t.Fatalf("AttachXen: %v", err)
	}
	if !inst.Attached() {
		t.Fatal("instance not attached after AttachXen returned")
	}
	if err := xa.AttachXen(ctx, inst.UUID(), req); !errors.Is(err, mdev.ErrAttached) {
		t.Errorf("second attach = %v, want ErrAttached", err)
	}
	g, err := xentest.NewGuest(h, xentest.DefaultSBDF)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	d, err := driver.Open(g, g, driver.Options{})
	if err != nil {
		t.Fatalf("driver.Open through the fake Xen: %v", err)
	}
	if rep := suite.Run(context.Background(), d, suite.Options{VectorN: 4096, ReduceN: 1 << 14}); !rep.OK() {
		t.Fatalf("guest suite through Xen:\n%s", rep)
	}
	d.Close()
	if st, _ := inst.Error(); st != abi.StatusOK {
		t.Errorf("error register = %v", st)
	}
	if err := m.Destroy(inst.UUID()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); h.Calls()["destroy_ioreq_server"] == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the ioreq server was not destroyed with the instance: calls %v", h.Calls())
		}
		time.Sleep(time.Millisecond)
	}
}
