package worker

import (
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/worker/wire"
)

// localInstance is an instance whose device work runs in this process
// (Config.InProcess): the unsafe baseline, with no isolation.
type localInstance struct {
	pool   *Pool
	cfg    InstanceConfig
	in     *aggregator.Instance
	mem    *guestmem.Map
	limits Limits
}

var _ Backend = (*localInstance)(nil)

func (p *Pool) createLocal(cfg InstanceConfig) (Backend, error) {
	l := &localInstance{pool: p, cfg: cfg, mem: &guestmem.Map{}, limits: cfg.Limits}
	in, err := p.local[cfg.Device].NewInstance(aggregator.InstanceConfig{
		ID: cfg.ID, Profile: cfg.Limits.Profile, MemBytes: cfg.Limits.MemBytes, ProgramBytes: cfg.Limits.ProgramBytes,
		ComputeUnits: cfg.Limits.ComputeUnits, Contexts: cfg.Limits.Contexts,
		Memory: l.mem, Logger: p.log.With("instance", cfg.ID), Notify: cfg.Notify,
	})
	if err != nil {
		return nil, err
	}
	l.in = in
	if cfg.Reuse {
		in.SetReuseDomain(l.domain())
	}
	return l, nil
}

// domain is the instance's reuse domain in the pool's in-process engine.
func (l *localInstance) domain() *reuse.Domain {
	if l.cfg.Shared {
		d, err := l.pool.eng.Shared(l.cfg.Domain)
		if err == nil {
			return d
		}
	}
	return l.pool.eng.Private(strings.TrimPrefix(l.cfg.Domain, reuse.PrivatePrefix))
}

func (l *localInstance) Limits() mmio.Limits {
	a := l.in.Limits()
	return mmio.Limits{MemBytes: a.MemBytes, MaxAlloc: a.MaxAlloc, ComputeUnits: a.ComputeUnits, MaxWorkGroup: a.MaxWorkGroup,
		ProfileName: a.Profile, DeviceName: a.DeviceName, Contexts: l.in.MaxContexts()}
}

func (l *localInstance) EnableRing(c mmio.RingConfig) error {
	return l.in.EnableRing(aggregator.RingConfig(c))
}
func (l *localInstance) DisableRing()                     { l.in.DisableRing() }
func (l *localInstance) RingEnabled() bool                { return l.in.RingEnabled() }
func (l *localInstance) Doorbell(tail uint32) error       { return l.in.Doorbell(tail) }
func (l *localInstance) Kick(shadow uint64) error         { return l.in.Kick(shadow) }
func (l *localInstance) ContextKick(id uint32) error      { return l.in.ContextKick(id) }
func (l *localInstance) Head() uint32                     { return l.in.Head() }
func (l *localInstance) Done() uint32                     { return l.in.Done() }
func (l *localInstance) Reset()                           { l.in.Reset() }
func (l *localInstance) Error() (abi.Status, uint32)      { return l.in.Error() }
func (l *localInstance) LatchError(s abi.Status)          { l.in.LatchError(s) }
func (l *localInstance) AckError()                        { l.in.AckError() }
func (l *localInstance) Update(r []guestmem.Region) error { return l.mem.Update(r) }
func (l *localInstance) Shared() *aggregator.Shared       { return l.in.Shared() }
func (l *localInstance) Domain() string                   { return l.cfg.Domain }

// Move changes the instance's reuse domain (in process, its state stays).
func (l *localInstance) Move(domain string, shared bool) error {
	if err := l.pool.declare(domain, shared); err != nil {
		return err
	}
	l.cfg.Domain, l.cfg.Shared = domain, shared
	if l.in.ReuseDomain() != nil {
		l.in.SetReuseDomain(l.domain())
	}
	return nil
}
func (l *localInstance) Lost() bool { return false }

func (l *localInstance) SetLimits(lim Limits) error {
	if err := l.in.SetProgramBytes(lim.ProgramBytes); err != nil {
		return err
	}
	if err := l.in.SetProfile(lim.Profile, lim.MemBytes); err != nil {
		return err
	}
	l.limits = lim
	l.pool.schedLimits(l.cfg.Device, l.cfg.ID, l.cfg.Domain, lim)
	return nil
}

func (l *localInstance) SetReuse(on bool) error {
	if on {
		l.in.SetReuseDomain(l.domain())
	} else {
		l.in.SetReuseDomain(nil)
	}
	return nil
}

func (l *localInstance) Close() error {
	err := l.in.Close()
	l.in.SetReuseDomain(nil)
	l.mem.Close()
	l.pool.scheds[l.cfg.Device].Remove(l.cfg.ID)
	if err != nil {
		return fmt.Errorf("close instance %s: %w", l.cfg.ID, err)
	}
	return nil
}

// localDomains describes the in-process engine's domains.
func (p *Pool) localDomains() []DomainStats {
	var out []DomainStats
	for _, d := range p.eng.Domains() {
		st := d.Stats.Snapshot()
		out = append(out, DomainStats{Name: d.Name(), Shared: d.Shared(), Workers: 0, StatsReply: wire.StatsReply{
			Entries: int64(d.Entries()), Bytes: d.Bytes(), Budget: d.Budget(), Hits: st.Hits, Misses: st.Misses,
			Skipped: st.Skipped, Recorded: st.Recorded, Evictions: st.Evictions, BytesSaved: st.BytesSaved,
			DeviceNanos: st.DeviceNanos, Instances: uint32(d.Users()),
		}})
	}
	return out
}
