package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/xen"
	"github.com/vgpud/vgpud/xen/xenctl"
)

// xenAttacher serves instances to Xen HVM domains (POST
// /v1/instances/{uuid}/xen, docs/xen.md): one ioreq server, with its own
// privcmd handle restricted to the domain, per attachment. It owns the
// sessions' goroutines; Wait waits for them after ctx ends.
type xenAttacher struct {
	ctx  context.Context // the daemon's: ends every session
	m    *mdev.Manager
	log  *slog.Logger
	open func() (xen.Hypervisor, error) // xenctl.Open, or a fake in tests
	wg   sync.WaitGroup
}

var _ control.XenAttacher = (*xenAttacher)(nil)

func newXenAttacher(ctx context.Context, m *mdev.Manager, log *slog.Logger) *xenAttacher {
	return &xenAttacher{ctx: ctx, m: m, log: log, open: func() (xen.Hypervisor, error) {
		h, err := xenctl.Open()
		if err != nil {
			return nil, fmt.Errorf("not a Xen dom0 with privcmd (xen-privcmd loaded, /dev/xen mounted)? %w", err)
		}
		return h, nil
	}}
}

// AttachXen starts an ioreq server for req.Domain serving instance id and
// returns once it serves, or with the error its setup met.
func (x *xenAttacher) AttachXen(ctx context.Context, id string, req control.XenAttachRequest) error {
	inst, err := x.m.Get(id)
	if err != nil {
		return err
	}
	if inst.Attached() {
		return fmt.Errorf("xen attach %s: %w", id, mdev.ErrAttached)
	}
	sbdf, err := xen.ParseSBDF(req.PCI)
	if err != nil {
		return fmt.Errorf("xen attach %s: %w", id, err)
	}
	if req.VCPUs < 0 || req.VCPUs > 4096 {
		return fmt.Errorf("xen attach %s: %d vcpus", id, req.VCPUs)
	}
	hv, err := x.open()
	if err != nil {
		return fmt.Errorf("xen attach %s: %w", id, err)
	}
	cfg := xen.Config{Domain: xen.DomID(req.Domain), SBDF: sbdf, VCPUs: req.VCPUs, RAM: req.RAMBytes, Restrict: true}
	srv := xen.NewServer(hv, cfg, inst.Endpoint())
	done := make(chan error, 1)
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		err := inst.Attach(x.ctx, srv)
		if c, ok := hv.(interface{ Close() error }); ok {
			c.Close()
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, xen.ErrClosed) {
			x.log.Warn("xen session ended", "instance", id, "domain", req.Domain, "err", err)
		}
		done <- err
	}()
	select {
	case <-srv.Serving():
		x.log.Info("xen domain attached", "instance", id, "domain", req.Domain, "pci", sbdf.String())
		return nil
	case err := <-done:
		if err == nil {
			err = fmt.Errorf("domain %d went away during setup: %w", req.Domain, xen.ErrNoDomain)
		}
		return fmt.Errorf("xen attach %s: %w", id, err)
	case <-ctx.Done():
		srv.Close()
		return fmt.Errorf("xen attach %s: %w", id, ctx.Err())
	}
}

// Wait waits for every session's goroutine (after the daemon's context
// ended or the instances were destroyed).
func (x *xenAttacher) Wait() { x.wg.Wait() }
