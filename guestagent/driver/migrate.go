package driver

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// Live migration (docs/agent-channel.md "Migration"): the host asks every
// program to quiesce its vGPU (Suspend), takes the device's final state,
// hot-unplugs it, migrates the VM, restores the state into a new device
// (the same buffer and program handles; the ring with the same base, slots
// and positions) plugged at the same slot, and asks the programs to resume
// (Resume with the new device's registers).

// Suspend quiesces the device for a migration. It makes every later call
// that would touch the ring or the registers wait until Resume (at most
// Options.Timeout, then the call fails with an error wrapping
// ErrSuspended), waits for the call in progress, if any, rings the doorbell
// for commands written but not rung, and waits until every command in
// flight has completed and been reaped, polling guest RAM. Then it closes
// the Registers if they implement io.Closer (OpenPCI's unmap the BAR): from
// then on the driver does not touch the device.
//
// The waits end with ctx (and each command's wait with Options.Timeout);
// if one fails, Suspend returns its error, the waiting calls proceed and
// the device stays usable. The first failure of a batched command stays
// for the next Finish. Suspending a suspended device does nothing.
//
// The device contexts opened on d (OpenContext) are held too: their calls
// wait for Resume, which moves them onto the new registers. Their
// commands in flight are not drained: their rings move with the
// instance's state (docs/migration.md), and complete on the destination.
func (d *Device) Suspend(ctx context.Context) error { return d.suspend(ctx, false) }

// SuspendMapped is Suspend for a migration that keeps the vGPU at its PCI
// slot and BAR addresses (agentmsg.QuiesceInPlace: vfio-user in place): it
// leaves the registers mapped, and the driver does not touch them until
// ResumeMapped (or Resume with other registers, which unmaps these).
func (d *Device) SuspendMapped(ctx context.Context) error { return d.suspend(ctx, true) }

func (d *Device) suspend(ctx context.Context, keep bool) error {
	d.migMu.Lock()
	defer d.migMu.Unlock()
	d.smu.Lock()
	if d.suspended {
		d.smu.Unlock()
		return nil
	}
	d.smu.Unlock()
	// The contexts first, while d still takes the calls a context's call
	// in progress may make on it (a create, destroy or reopen).
	kids, err := d.holdKids(ctx)
	if err != nil {
		return fmt.Errorf("suspend: %w", err)
	}
	d.smu.Lock()
	d.gate = make(chan struct{})
	d.smu.Unlock()
	if err := d.lockCtx(ctx); err != nil {
		d.smu.Lock()
		d.openGateLocked()
		d.smu.Unlock()
		releaseKids(kids, nil, Info{})
		return fmt.Errorf("suspend: wait for the call in progress: %w", err)
	}
	defer d.mu.Unlock()
	fail := func(err error) error {
		d.openGate()
		releaseKids(kids, nil, Info{})
		return fmt.Errorf("suspend: %w", err)
	}
	if d.closed {
		return fail(ErrClosed)
	}
	d.flush()
	for d.reaped < d.next {
		if err := d.reapOneCtx(ctx); err != nil {
			return fail(err)
		}
	}
	if c, ok := d.regs.(io.Closer); ok && !keep {
		if err := c.Close(); err != nil {
			// The device is idle and the driver will not touch these
			// registers again: report, but stay suspended.
			d.log.Warn("vgpu suspend: close registers", "err", err)
		}
	}
	d.smu.Lock()
	d.suspended = true
	d.kept = keep
	d.smu.Unlock()
	d.log.Debug("vgpu suspended", "commands", d.next, "mapped", keep)
	return nil
}

// holdKids closes the gates of d's device contexts and waits for their
// calls in progress; from then on their calls wait for releaseKids.
func (d *Device) holdKids(ctx context.Context) ([]*Device, error) {
	d.kidsMu.Lock()
	kids := slices.Collect(maps.Keys(d.kids))
	d.kidsMu.Unlock()
	for i, k := range kids {
		k.smu.Lock()
		if k.gate == nil {
			k.gate = make(chan struct{})
		}
		k.smu.Unlock()
		if err := k.lockCtx(ctx); err != nil {
			releaseKids(kids[:i+1], nil, Info{})
			return nil, fmt.Errorf("wait for context %d's call in progress: %w", k.ctxID, err)
		}
		k.mu.Unlock()
	}
	return kids, nil
}

// releaseKids lets held device contexts go on, on regs and with info
// when regs is not nil (the registers Resume moved their vGPU to, which
// may be another model).
func releaseKids(kids []*Device, regs Registers, info Info) {
	for _, k := range kids {
		if regs != nil {
			k.mu.Lock()
			k.regs = regs
			k.lostAt = time.Time{}
			k.smu.Lock()
			k.info = info
			k.smu.Unlock()
			k.mu.Unlock()
		}
		k.openGate()
	}
}

// lockCtx takes mu, giving up when ctx ends. The gate is closed, so calls
// that start now release mu at once; only the call in progress holds it.
func (d *Device) lockCtx(ctx context.Context) error {
	sleep := 50 * time.Microsecond
	for !d.mu.TryLock() {
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(sleep)
		if sleep < 2*time.Millisecond {
			sleep *= 2
		}
	}
	return nil
}

// openGate lets the calls waiting for Resume proceed.
func (d *Device) openGate() {
	d.smu.Lock()
	defer d.smu.Unlock()
	d.openGateLocked()
}

func (d *Device) openGateLocked() {
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.suspended = false
	d.kept = false
}

// Suspended reports whether Suspend has completed and Resume has not.
func (d *Device) Suspended() bool {
	d.smu.Lock()
	defer d.smu.Unlock()
	return d.suspended
}

// Resume continues a suspended device on regs, the BAR0 of the device the
// host restored the state into (a new PCI device after a hot-plug, possibly
// another model, or the same one mapped again when the migration was
// abandoned). It checks the ID register and the ABI major version, re-reads
// Info (limits and names may differ), and checks that the device holds the
// ring as the driver left it: enabled, at the same base and completion
// addresses with the same slots, and with its tail, head and done positions
// (abi.RegRingTail, RegRingHead, RegRingDone) all equal to the driver's own
// count of commands submitted (all of them completed before Suspend; the
// tail only where the driver writes it, not where it kicks). It
// neither resets nor re-enables the ring. Then the waiting calls proceed on
// regs with the same buffers and programs.
//
// If a check fails the device stays suspended (the caller may Resume again
// with other registers, or Close) and regs are not closed.
//
// Registers kept mapped by SuspendMapped are closed once regs pass.
func (d *Device) Resume(regs Registers) error {
	d.migMu.Lock()
	defer d.migMu.Unlock()
	return d.resumeOn(regs, false)
}

// ResumeMapped continues a device suspended by SuspendMapped on the
// registers it kept, as Resume does. When BAR0 does not answer there (the
// ID register does not read abi.IDMagic: the VMM has not mapped the BAR,
// whose configuration was not restored) it returns an error wrapping
// ErrNoDevice and the device stays suspended: the caller reopens the
// device and calls Resume with the new registers. A device suspended by
// Suspend gets an error wrapping ErrInvalid.
func (d *Device) ResumeMapped() error {
	d.migMu.Lock()
	defer d.migMu.Unlock()
	d.smu.Lock()
	kept := d.suspended && d.kept
	d.smu.Unlock()
	if !kept {
		return fmt.Errorf("resume mapped: the device was not suspended with its registers mapped: %w", ErrInvalid)
	}
	return d.resumeOn(d.regs, true)
}

// resumeOn resumes d on regs (same: the registers SuspendMapped kept)
// and releases its device contexts. Caller holds migMu.
func (d *Device) resumeOn(regs Registers, same bool) error {
	if err := d.resume(regs, same); err != nil {
		return err
	}
	// The contexts go on on the new registers (d's lock released: a
	// context's call may take it).
	d.kidsMu.Lock()
	kids := slices.Collect(maps.Keys(d.kids))
	d.kidsMu.Unlock()
	releaseKids(kids, regs, d.Info())
	return nil
}

func (d *Device) resume(regs Registers, same bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if !d.Suspended() {
		return fmt.Errorf("resume: device not suspended: %w", ErrInvalid)
	}
	if id := regs.Read32(abi.RegID); id != abi.IDMagic {
		return fmt.Errorf("resume: id register %#x, want %#x: %w", id, abi.IDMagic, ErrNoDevice)
	}
	info := readInfo(regs)
	if err := checkVersion(info); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if err := d.checkRestored(regs); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	d.smu.Lock()
	kept := d.kept
	d.smu.Unlock()
	if c, ok := d.regs.(io.Closer); ok && kept && !same {
		c.Close() // the mapping SuspendMapped kept; regs replace it
	}
	d.regs = regs
	d.lostAt = time.Time{}
	d.smu.Lock()
	d.info = info
	d.programKick(regs) // the new device may or may not offer it
	d.openGateLocked()
	d.smu.Unlock()
	d.log.Debug("vgpu resumed", "profile", info.Profile, "device", info.Name, "commands", d.next)
	return nil
}

// checkRestored compares the ring registers of regs with the driver's
// state. Caller holds mu; nothing is in flight.
func (d *Device) checkRestored(regs Registers) error {
	rd64 := func(lo, hi uint32) uint64 { return uint64(regs.Read32(lo)) | uint64(regs.Read32(hi))<<32 }
	if st := abi.Status(regs.Read32(abi.RegError)); st == abi.StatusDeviceLost {
		return fmt.Errorf("%w: the state was not restored", ErrDeviceLost)
	}
	if st := regs.Read32(abi.RegStatus); st&abi.StatusBitRingEnabled == 0 {
		return fmt.Errorf("ring not enabled (status register %#x): the state was not restored: %w", st, ErrProtocol)
	}
	want := uint32(d.next)
	type check struct {
		name      string
		got, want uint64
	}
	checks := []check{
		{"ring base", rd64(abi.RegRingBaseLo, abi.RegRingBaseHi), d.ring.gpa},
		{"completion base", rd64(abi.RegComplBaseLo, abi.RegComplBaseHi), d.compl.gpa},
		{"ring slots", uint64(regs.Read32(abi.RegRingSlots)), d.slots},
		{"ring head", uint64(regs.Read32(abi.RegRingHead)), uint64(want)},
		{"ring done", uint64(regs.Read32(abi.RegRingDone)), uint64(want)},
	}
	if !d.kick {
		// RegRingTail reads back the last value written to it, which a
		// driver that kicks (the tail in its shadow) never writes.
		checks = append(checks, check{"ring tail", uint64(regs.Read32(abi.RegRingTail)), uint64(uint32(d.rung))})
	}
	for _, r := range checks {
		if r.got != r.want {
			return fmt.Errorf("restored %s is %#x, the driver's is %#x: %w", r.name, r.got, r.want, ErrProtocol)
		}
	}
	return nil
}

// Abandon gives the device up: its state is gone (the host's vgpud
// restarted and re-plugged an empty device, agentmsg.ResumeLost). Every
// call, those waiting for a command or for Resume included, fails with an
// error wrapping ErrDeviceLost that counts the commands lost in flight;
// the program opens the new device (Open, a reset) and makes its buffers
// and programs again. Close then touches no register. Safe to call from
// any goroutine, at any time, more than once.
func (d *Device) Abandon() {
	if d.abandoned.Swap(true) {
		return
	}
	d.kidsMu.Lock()
	for k := range d.kids {
		k.Abandon()
	}
	d.kidsMu.Unlock()
	d.openGate() // calls waiting for Resume go on, and fail
	d.log.Debug("vgpu abandoned: its state is gone")
}

// lostErr is the error of a call on an abandoned device. Caller holds mu.
func (d *Device) lostErr() error {
	return fmt.Errorf("%w: the device came back without its state: %d commands in flight were lost with every buffer and program; open it again",
		ErrDeviceLost, d.next-d.reaped)
}
