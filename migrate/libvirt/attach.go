package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate"
)

// Action is what giving a domain its vGPU took.
type Action string

const (
	// ActionStarted: the domain was shut off; it was started paused, the
	// vGPU plugged, and then resumed, so the guest boots with it.
	ActionStarted Action = "started"
	// ActionHotplugged: the domain ran (or was paused) without the proxy
	// device; one was hot-plugged at migrate.DefaultSlot.
	ActionHotplugged Action = "hotplugged"
	// ActionReattached: the domain had the proxy device on a socket no
	// vgpud serves (vgpud restarted): it was replaced at the same slot and
	// the guest told its device state was lost (migrate.ReattachVia).
	ActionReattached Action = "reattached"
	// ActionDefined: the domain was shut off and the manager's VMs attach
	// by vfio-user: the vfio-user-pci device was added to the domain's
	// definition (<qemu:commandline>) and the domain started, its QEMU
	// connecting to the instance as it starts.
	ActionDefined Action = "defined"
)

// Report says what Attach or Ensure did.
type Report struct {
	Domain   string `json:"domain"`
	Instance string `json:"instance"`
	Action   Action `json:"action"`
	Slot     int    `json:"slot"`
	// Programs and AgentErr: after a reattach, how many guest programs
	// acknowledged the loss, or why the guest agent did not answer.
	Programs uint32 `json:"programs,omitempty"`
	AgentErr string `json:"agent_error,omitempty"`
	// MetadataErr: the vGPU is attached, but recording the instance in
	// the domain's metadata failed (Attach only).
	MetadataErr string        `json:"metadata_error,omitempty"`
	Took        time.Duration `json:"took_ns"`
}

// ErrDomainHasOther: the domain's metadata names another instance, which
// is attached to a VM; detach that first.
var ErrDomainHasOther = errors.New("the domain has another instance's vGPU attached")

// ErrNotActive: the domain is in a state where no vGPU can be plugged
// (crashed, shutting down, suspended to RAM ...).
var ErrNotActive = errors.New("the domain is in no state to get a vGPU")

// ErrNeedsDefinition: the manager's VMs attach by vfio-user, whose device
// a libvirt domain gets only in its definition, as it starts.
var ErrNeedsDefinition = errors.New("a vfio-user vGPU is added to a libvirt domain's definition, as it starts: shut the domain off and attach again")

// Attacher gives libvirt domains their vGPU. Its methods may be called
// concurrently: work on one domain, or with one instance, is serialized.
type Attacher struct {
	Manager *mdev.Manager
	Virsh   Runner
	Logger  *slog.Logger
	// Timeout bounds one attach (0: 3 minutes), the guest's ejecting a
	// dead device and its agent's answer included.
	Timeout time.Duration
	// DeviceID is the proxy device's QEMU id ("": migrate.DefaultDeviceID).
	DeviceID string
	// PollEvery is Monitor.PollEvery for the monitors it makes.
	PollEvery time.Duration

	locks keyedLocks
}

func (a *Attacher) log() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}

func (a *Attacher) timeout() time.Duration {
	if a.Timeout <= 0 {
		return 3 * time.Minute
	}
	return a.Timeout
}

func (a *Attacher) deviceID() string {
	if a.DeviceID == "" {
		return migrate.DefaultDeviceID
	}
	return a.DeviceID
}

// step is what plan decides.
type step int

const (
	stepNone  step = iota // nothing to do
	stepStart             // start the domain paused, plug, resume
	stepPlug              // the domain has a QEMU: hot-plug, or reattach if it has the device
)

func (s step) String() string {
	return [...]string{"none", "start", "plug"}[s]
}

// plan decides what giving a domain in state the vGPU of an instance
// that is (or not) attached to a VM takes. explicit: an operator asked
// (vgpuctl attach), who may have a shut-off domain started and is told
// about an attached instance; the watcher (explicit false) never starts a
// domain and leaves an attached instance alone.
func plan(state string, attached, explicit bool) (step, error) {
	if attached {
		if explicit {
			return stepNone, migrate.ErrAttached
		}
		return stepNone, nil
	}
	switch state {
	case StateShutOff:
		if explicit {
			return stepStart, nil
		}
		return stepNone, nil
	case StateRunning, StatePaused, StateBlocked:
		return stepPlug, nil
	}
	return stepNone, fmt.Errorf("domain state %q: %w", state, ErrNotActive)
}

func (a *Attacher) run(ctx context.Context, args ...string) ([]byte, error) {
	return a.Virsh.Run(ctx, nil, args...)
}

func (a *Attacher) domInfo(ctx context.Context, domain string) (DomainInfo, error) {
	out, err := a.run(ctx, "dominfo", "--domain", domain)
	if err != nil {
		return DomainInfo{}, err
	}
	return ParseDomInfo(out)
}

// metadata reads the domain's vgpud element (live for an active domain,
// else its persistent definition).
func (a *Attacher) metadata(ctx context.Context, domain string) (Metadata, error) {
	out, err := a.run(ctx, "metadata", "--domain", domain, "--uri", MetadataURI)
	if err != nil {
		return Metadata{}, err
	}
	return ParseMetadata(out)
}

// setMetadata records md in the domain: in its live definition if it
// runs, in its persistent one if it has one.
func (a *Attacher) setMetadata(ctx context.Context, d DomainInfo, md Metadata) error {
	args := []string{"metadata", "--domain", d.UUID, "--uri", MetadataURI, "--key", MetadataKey, "--set", md.XML()}
	if d.Active() {
		args = append(args, "--live")
	}
	if d.Persistent {
		args = append(args, "--config")
	}
	_, err := a.run(ctx, args...)
	return err
}

// instance returns the manager's instance id (any UUID spelling).
func (a *Attacher) instance(id string) (*mdev.Instance, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, mdev.ErrNotFound)
	}
	return a.Manager.Get(u.String())
}

// Attach gives domain (a name, id or UUID) instance id's vGPU, whatever
// state the domain is in (plan), and records the instance in the
// domain's metadata so that the Watcher plugs it from then on. It
// refuses an instance attached to a VM (migrate.ErrAttached), a domain
// whose metadata names another instance that is attached
// (ErrDomainHasOther), and domains in no state to get one
// (ErrNotActive).
func (a *Attacher) Attach(ctx context.Context, domain, id string) (*Report, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	inst, err := a.instance(id)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if err := checkName(domain); err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	d, err := a.domInfo(ctx, domain)
	if err != nil {
		return nil, fmt.Errorf("attach %s to %s: %w", inst.UUID(), domain, err)
	}
	unlock, err := a.locks.lock(ctx, "domain "+d.UUID, "instance "+inst.UUID())
	if err != nil {
		return nil, fmt.Errorf("attach %s to %s: %w", inst.UUID(), d.Name, err)
	}
	defer unlock()
	// What the domain is now that no other attach runs on it.
	if d, err = a.domInfo(ctx, d.UUID); err != nil {
		return nil, fmt.Errorf("attach %s to %s: %w", inst.UUID(), domain, err)
	}
	if md, err := a.metadata(ctx, d.UUID); err == nil && md.Instance != inst.UUID() {
		if other, err := a.Manager.Get(md.Instance); err == nil && other.Attached() {
			return nil, fmt.Errorf("attach %s to %s: its metadata names %s: %w", inst.UUID(), d.Name, md.Instance, ErrDomainHasOther)
		}
	}
	st, err := plan(d.State, inst.Attached(), true)
	if err != nil {
		return nil, fmt.Errorf("attach %s to %s: %w", inst.UUID(), d.Name, err)
	}
	rep, err := a.apply(ctx, d, inst, st)
	if err != nil {
		return rep, fmt.Errorf("attach %s to %s: %w", inst.UUID(), d.Name, err)
	}
	if st == stepStart {
		d.State = StateRunning // its live definition needs the element too
	}
	if err := a.setMetadata(ctx, d, Metadata{Instance: inst.UUID()}); err != nil {
		rep.MetadataErr = err.Error()
		a.log().Warn("libvirt domain got its vGPU, but recording it in the domain's metadata failed",
			"domain", d.Name, "instance", inst.UUID(), "err", err)
	}
	rep.Took = time.Since(start)
	a.log().Info("libvirt domain got its vGPU", "domain", d.Name, "instance", inst.UUID(), "action", rep.Action,
		"slot", rep.Slot, "took", rep.Took)
	return rep, nil
}

// Ensure plugs the vGPU that domain's metadata names, if the domain runs
// and the instance has no VM connection: what the Watcher does on every
// domain start and resync. It returns nil and no error when there is
// nothing to do (no such domain any more, shut off, no vgpud element, the
// instance attached already); an error when the metadata is malformed,
// names an instance this vgpud does not have, or the plug failed.
func (a *Attacher) Ensure(ctx context.Context, domain string) (*Report, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	log := a.log().With("domain", domain)
	d, err := a.domInfo(ctx, domain)
	if errors.Is(err, ErrNoDomain) {
		log.Debug("libvirt domain gone")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !d.Active() {
		return nil, nil
	}
	md, err := a.metadata(ctx, d.UUID)
	if errors.Is(err, ErrNoMetadata) {
		log.Debug("libvirt domain names no vGPU instance")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", d.Name, err)
	}
	inst, err := a.Manager.Get(md.Instance)
	if err != nil {
		return nil, fmt.Errorf("domain %s names vGPU instance %s, which this vgpud does not have: %w", d.Name, md.Instance, err)
	}
	unlock, err := a.locks.lock(ctx, "domain "+d.UUID, "instance "+inst.UUID())
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", d.Name, err)
	}
	defer unlock()
	if d, err = a.domInfo(ctx, d.UUID); err != nil {
		return nil, fmt.Errorf("domain %s: %w", domain, err)
	}
	st, err := plan(d.State, inst.Attached(), false)
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", d.Name, err)
	}
	if st == stepNone {
		log.Debug("libvirt domain needs nothing", "state", d.State, "instance", inst.UUID(), "attached", inst.Attached())
		return nil, nil
	}
	rep, err := a.apply(ctx, d, inst, st)
	if err != nil {
		return rep, fmt.Errorf("domain %s, instance %s: %w", d.Name, inst.UUID(), err)
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// apply carries out st for domain d and instance inst.
func (a *Attacher) apply(ctx context.Context, d DomainInfo, inst *mdev.Instance, st step) (*Report, error) {
	rep := &Report{Domain: d.Name, Instance: inst.UUID()}
	if a.Manager.KeepsDeviceOnMigration() && st != stepNone {
		// vfio-user: the transport whose device stays in the VM across a
		// migration, so libvirt must know it (virsh migrate starts the
		// destination QEMU from the definition); a hot-plug through the
		// monitor would be outside it.
		return rep, a.define(ctx, d, inst, st, rep)
	}
	mon := NewMonitor(a.Virsh, d.UUID)
	mon.PollEvery = a.PollEvery
	switch st {
	case stepNone:
		return rep, nil
	case stepStart:
		if _, err := a.run(ctx, "start", "--paused", "--domain", d.UUID); err != nil {
			return rep, err
		}
		if err := a.plugOrReattach(ctx, mon, inst, rep); err != nil {
			// The domain runs only because of this attach: leave it as
			// it was rather than paused without its vGPU.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, derr := a.run(dctx, "destroy", "--domain", d.UUID); derr != nil {
				return rep, fmt.Errorf("%w; the domain, started paused for it, could not be stopped again: %w", err, derr)
			}
			return rep, fmt.Errorf("%w (the domain, started paused for it, was stopped again)", err)
		}
		if _, err := a.run(ctx, "resume", "--domain", d.UUID); err != nil {
			return rep, fmt.Errorf("the vGPU is plugged, but resuming the domain failed: %w", err)
		}
		rep.Action = ActionStarted
		return rep, nil
	}
	return rep, a.plugOrReattach(ctx, mon, inst, rep)
}

// plugOrReattach hot-plugs the vGPU into a QEMU without the proxy
// device, or replaces a proxy device left on a dead socket.
func (a *Attacher) plugOrReattach(ctx context.Context, mon *Monitor, inst *mdev.Instance, rep *Report) error {
	opts := migrate.ReattachOptions{DeviceID: a.deviceID(), Timeout: a.timeout()}
	_, err := migrate.DeviceSlot(ctx, mon, opts.DeviceID)
	switch {
	case errors.Is(err, migrate.ErrNoDevice):
		if err := migrate.Plug(ctx, a.Manager, inst.UUID(), mon, migrate.DefaultSlot, opts); err != nil {
			return err
		}
		rep.Action, rep.Slot = ActionHotplugged, migrate.DefaultSlot
		return nil
	case err != nil:
		return err
	}
	rr, err := migrate.ReattachVia(ctx, a.Manager, inst.UUID(), mon, opts)
	if rr != nil {
		rep.Slot, rep.Programs, rep.AgentErr = rr.Slot, rr.Programs, rr.AgentErr
	}
	if err != nil {
		return err
	}
	rep.Action = ActionReattached
	return nil
}

// keyedLocks serializes work by key: a domain, an instance.
type keyedLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock takes every key, in the order given (callers always name a domain
// before an instance, so two callers never wait for each other in a
// cycle), or none if ctx ends first.
func (k *keyedLocks) lock(ctx context.Context, keys ...string) (unlock func(), err error) {
	var taken []string
	release := func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, key := range taken {
			close(k.held[key])
			delete(k.held, key)
		}
	}
	for _, key := range keys {
		for {
			k.mu.Lock()
			if k.held == nil {
				k.held = make(map[string]chan struct{})
			}
			ch, busy := k.held[key]
			if !busy {
				k.held[key] = make(chan struct{})
				k.mu.Unlock()
				taken = append(taken, key)
				break
			}
			k.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				release()
				return nil, ctx.Err()
			}
		}
	}
	return release, nil
}

// define gives a shut-off domain the vfio-user-pci device on inst's
// socket in its persistent definition and starts it.
func (a *Attacher) define(ctx context.Context, d DomainInfo, inst *mdev.Instance, st step, rep *Report) error {
	if st != stepStart || !d.Persistent {
		return fmt.Errorf("domain state %q: %w", d.State, ErrNeedsDefinition)
	}
	old, err := a.run(ctx, "dumpxml", "--inactive", "--security-info", "--domain", d.UUID)
	if err != nil {
		return err
	}
	dom, added, err := AddVFIOUserDevice(old, a.deviceID(), inst.Socket(), inst.QMPSocket(), migrate.DefaultSlot)
	if err != nil {
		return fmt.Errorf("the domain's definition: %w", err)
	}
	if added {
		if err := a.defineXML(ctx, dom); err != nil {
			return fmt.Errorf("define the domain with the vGPU: %w", err)
		}
	}
	if _, err := a.run(ctx, "start", "--domain", d.UUID); err != nil {
		if !added {
			return err
		}
		// Leave the definition as it was.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := a.defineXML(dctx, old); derr != nil {
			return fmt.Errorf("%w; restoring the definition without the vGPU failed too: %w", err, derr)
		}
		return fmt.Errorf("%w (the definition was restored without the vGPU)", err)
	}
	rep.Action, rep.Slot = ActionDefined, migrate.DefaultSlot
	return nil
}

// defineXML runs virsh define on dom.
func (a *Attacher) defineXML(ctx context.Context, dom []byte) error {
	return a.runWithFile(ctx, dom, "define", "--file", "/dev/fd/3")
}

// runWithFile runs virsh with data readable at /dev/fd/3 (an unlinked
// temporary file: virsh opens the path).
func (a *Attacher) runWithFile(ctx context.Context, data []byte, args ...string) error {
	f, err := os.CreateTemp("", "vgpud-domain-*.xml")
	if err != nil {
		return err
	}
	os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = a.Virsh.Run(ctx, []*os.File{f}, args...)
	return err
}
