package aggregator

import (
	"errors"
	"log/slog"
	"sync"

	"github.com/vgpud/vgpud/gpu"
)

// ErrClosed is returned by operations on a closed Device or Instance.
var ErrClosed = errors.New("closed")

// Device is one physical device shared by the instances placed on it.
// Its arbiter (the device's scheduler) grants their device turns.
type Device struct {
	gpu  gpu.Device
	info gpu.Info
	log  *slog.Logger
	arb  Arbiter

	mu        sync.Mutex
	instances map[string]*Instance
	closed    bool
}

// NewDevice wraps a physical device whose turns arb grants. The Device
// takes ownership of neither: the caller closes g after closing the
// Device.
func NewDevice(g gpu.Device, arb Arbiter, log *slog.Logger) *Device {
	if log == nil {
		log = slog.Default()
	}
	info := g.Info()
	return &Device{
		gpu:       g,
		info:      info,
		log:       log.With("device", info.Name),
		arb:       arb,
		instances: make(map[string]*Instance),
	}
}

// Info describes the physical device.
func (d *Device) Info() gpu.Info { return d.info }

// Instances returns the number of instances placed on d.
func (d *Device) Instances() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.instances)
}

// Close closes every instance still on the device.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	insts := make([]*Instance, 0, len(d.instances))
	for _, in := range d.instances {
		insts = append(insts, in)
	}
	d.mu.Unlock()
	var errs []error
	for _, in := range insts {
		errs = append(errs, in.Close())
	}
	return errors.Join(errs...)
}

func (d *Device) remove(id string) {
	d.mu.Lock()
	delete(d.instances, id)
	d.mu.Unlock()
}
