package mdev

import (
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/mmio"
)

// backend adapts an aggregator instance to the register file's Backend.
type backend struct {
	*aggregator.Instance
}

var _ mmio.Backend = backend{}

func (b backend) Limits() mmio.Limits {
	l := b.Instance.Limits()
	return mmio.Limits{
		MemBytes:     l.MemBytes,
		MaxAlloc:     l.MaxAlloc,
		ComputeUnits: l.ComputeUnits,
		MaxWorkGroup: l.MaxWorkGroup,
		ProfileName:  l.Profile,
		DeviceName:   l.DeviceName,
	}
}

func (b backend) EnableRing(c mmio.RingConfig) error {
	return b.Instance.EnableRing(aggregator.RingConfig(c))
}
