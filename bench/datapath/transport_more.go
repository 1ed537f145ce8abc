package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
	"github.com/vgpud/vgpud/xen"
	"github.com/vgpud/vgpud/xen/xentest"
)

// attached is a session serving an instance, and how to end both.
type attached struct {
	done    chan error
	destroy func() error
}

// serveOn attaches s to a fresh instance (as the transport's listener or
// event loop would) and returns the instance.
func (b *bench) serveOn(ctx context.Context, mk func(transport.Device) transport.Session) (*mdev.Instance, transport.Session, *attached, error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return nil, nil, nil, err
	}
	s := mk(inst.Endpoint())
	a := &attached{done: make(chan error, 1), destroy: destroy}
	go func() { a.done <- inst.Attach(ctx, s) }()
	return inst, s, a, nil
}

// end destroys the instance (which closes the session) and waits for it.
func (a *attached) end() error {
	err := a.destroy()
	serr := <-a.done
	if errors.Is(serr, transport.ErrClosed) || errors.Is(serr, context.Canceled) {
		serr = nil
	}
	return errors.Join(err, serr)
}

// morePaths are the transports beside mpqemu: vfio-user through its
// register messages and through the kick ioeventfd, and Xen's ioreq
// round trip on the fake hypervisor.
func (b *bench) morePaths(ctx context.Context) ([]accessPath, error) {
	var out []accessPath
	vfio, kick, err := b.vfioUserPaths(ctx)
	if err != nil {
		return out, fmt.Errorf("vfio-user: %w", err)
	}
	out = append(out, vfio, kick)
	x, err := b.xenPath(ctx)
	if err != nil {
		return out, fmt.Errorf("xen: %w", err)
	}
	return append(out, x), nil
}

func (b *bench) vfioUserPaths(ctx context.Context) (regions, kick accessPath, err error) {
	client, server, err := socketPair()
	if err != nil {
		return regions, kick, err
	}
	_, _, a, err := b.serveOn(ctx, func(dev transport.Device) transport.Session { return vfiouser.NewSession(server, dev) })
	if err != nil {
		client.Close()
		server.Close()
		return regions, kick, err
	}
	c, err := vfiousertest.New(client, 16<<20)
	if err != nil {
		return regions, kick, errors.Join(err, a.end())
	}
	regions = accessPath{
		name:    "vfio-user: REGION_WRITE/READ",
		measure: func(n int) (float64, float64, error) { return timeAccesses(c, n) },
		close:   func() error { return errors.Join(c.Close(), a.end()) },
	}
	kick = accessPath{
		name: "vfio-user: kick on the ioeventfd (vCPU side)",
		measure: func(n int) (float64, float64, error) {
			start := time.Now()
			for range n {
				if err := c.Kick(); err != nil {
					return 0, 0, err
				}
			}
			return float64(time.Since(start).Nanoseconds()) / float64(n), 0, nil
		},
	}
	return regions, kick, nil
}

func (b *bench) xenPath(ctx context.Context) (accessPath, error) {
	h, err := xentest.New(16<<20, 2)
	if err != nil {
		return accessPath{}, err
	}
	var srv *xen.Server
	_, _, a, err := b.serveOn(ctx, func(dev transport.Device) transport.Session {
		srv = xen.NewServer(h, xen.Config{Domain: h.Domain(), SBDF: xentest.DefaultSBDF}, dev)
		return srv
	})
	if err != nil {
		h.Close()
		return accessPath{}, err
	}
	select {
	case <-srv.Serving():
	case err := <-a.done:
		a.done <- err
		return accessPath{}, errors.Join(fmt.Errorf("ioreq server did not start: %w", err), a.end(), h.Close())
	}
	g, err := xentest.NewGuest(h, xentest.DefaultSBDF)
	if err != nil {
		return accessPath{}, errors.Join(err, a.end(), h.Close())
	}
	return accessPath{
		name:    "xen: ioreq round trip (fake hypervisor)",
		floor:   eventfdFloorName,
		measure: func(n int) (float64, float64, error) { return timeAccesses(g, n) },
		close:   func() error { return errors.Join(g.Close(), a.end(), h.Close()) },
	}, nil
}
