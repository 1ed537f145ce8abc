package agent

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// Migration (docs/agent-channel.md "Migration").
const (
	// DefaultMigrationDeadline bounds a Quiesce or Resume whose deadline_ms
	// is 0.
	DefaultMigrationDeadline = 30 * time.Second
	// replyWait is how long an answer waits for a connection (the channel
	// may be reconnecting) before it is dropped.
	replyWait = 10 * time.Second
	// migrationQueue bounds the requests waiting for the one in progress.
	migrationQueue = 8
)

// MigrationHandler is what a guest program does when the host migrates the
// VM (docs/agent-channel.md "Migration"). Quiesce drains the program's
// in-flight vGPU commands, stops touching the device (unmaps BAR0, or
// keeps it mapped when InPlace(ctx)) and makes further calls wait; Resume
// waits for the device to be present again, maps it and lets the calls
// continue. replugged says the device was hot-unplugged and a new one
// (possibly another model) plugged at the same slot; without it the
// migration was abandoned and the same device is still there. Both must
// return when ctx ends (its deadline is the host's).
type MigrationHandler interface {
	Quiesce(ctx context.Context) error
	Resume(ctx context.Context, replugged bool) error
}

// LostHandler is a MigrationHandler that also handles a device that came
// back without its state (agentmsg.ResumeLost: vgpud restarted): Lost
// makes the program's vGPU calls fail with driver.ErrDeviceLost, so that
// it opens the new device and makes its state again. A handler without it
// gets Resume(ctx, true).
type LostHandler interface {
	Lost(ctx context.Context) error
}

// migrator answers one request (Quiesce or Resume; Checkpoint or
// Reconfigure) with a status and a count of programs: a program's handler,
// or the Relay on behalf of its clients.
type migrator interface {
	migrate(ctx context.Context, req agentmsg.Message) (agentmsg.MigrationStatus, uint32)
}

// HandleMigration makes the client answer the host's Quiesce and Resume by
// calling h (nil: none) and announce agentmsg.FeatureMigration in its Hello.
// Call it before Run; when the channel is already up the client sends Hello
// again with the new features. A Quiesce runs h.Quiesce with a deadline of
// the request's deadline_ms and is answered Quiesced with status OK and
// programs 1 when it returns nil, Timeout when it returns an error wrapping
// context.DeadlineExceeded or driver.ErrTimeout, Failed otherwise; Resume
// likewise, answered Resumed. A client without a handler answers both with
// status OK and programs 0.
func (c *Client) HandleMigration(h MigrationHandler) {
	var m migrator
	if h != nil {
		m = handlerMigrator{h}
	}
	c.setMigrator(m)
}

// setMigrator installs m and re-announces the features if they changed on
// a connection that already sent its Hello.
func (c *Client) setMigrator(m migrator) {
	c.helloMu.Lock()
	defer c.helloMu.Unlock()
	c.mu.Lock()
	changed := (c.mig == nil) != (m == nil)
	c.mig = m
	rwc, hello := c.rwc, c.greetingLocked()
	c.mu.Unlock()
	if changed && rwc != nil {
		// Best effort: if the write fails the connection is failing, and
		// the next one starts with the new Hello.
		rwc.Write(hello)
	}
}

// inPlaceKey marks the context of a Quiesce that has QuiesceInPlace.
type inPlaceKey struct{}

// InPlace reports whether ctx is that of a MigrationHandler's Quiesce for
// a migration that keeps the vGPU at its PCI slot and BAR addresses
// (agentmsg.QuiesceInPlace): the handler may keep BAR0 mapped
// (driver.Device.SuspendMapped), and on Resume find it answering again at
// once (the agent restores the device's PCI configuration first).
func InPlace(ctx context.Context) bool {
	on, _ := ctx.Value(inPlaceKey{}).(bool)
	return on
}

// handlerMigrator adapts a program's MigrationHandler.
type handlerMigrator struct{ h MigrationHandler }

func (hm handlerMigrator) migrate(ctx context.Context, req agentmsg.Message) (agentmsg.MigrationStatus, uint32) {
	var err error
	switch req := req.(type) {
	case *agentmsg.Quiesce:
		if req.Flags&agentmsg.QuiesceInPlace != 0 {
			ctx = context.WithValue(ctx, inPlaceKey{}, true)
		}
		err = hm.h.Quiesce(ctx)
	case *agentmsg.Resume:
		if lh, ok := hm.h.(LostHandler); ok && req.Flags&agentmsg.ResumeLost != 0 {
			err = lh.Lost(ctx)
		} else {
			err = hm.h.Resume(ctx, req.Flags&agentmsg.ResumeReplugged != 0)
		}
	}
	return answerOf(err)
}

// answerOf is the status and program count a program's handler earns
// with err: ok and 1, or timeout (a deadline) or failed and 0.
func answerOf(err error) (agentmsg.MigrationStatus, uint32) {
	switch {
	case err == nil:
		return agentmsg.MigrationOK, 1
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, driver.ErrTimeout):
		return agentmsg.MigrationTimeout, 0
	default:
		return agentmsg.MigrationFailed, 0
	}
}

// migrationDeadline is how long a request (migration or
// reconfiguration) may take.
func migrationDeadline(req agentmsg.Message) time.Duration {
	var ms uint32
	switch req := req.(type) {
	case *agentmsg.Quiesce:
		ms = req.DeadlineMs
	case *agentmsg.Resume:
		ms = req.DeadlineMs
	case *agentmsg.Checkpoint:
		ms = req.DeadlineMs
	case *agentmsg.Reconfigure:
		ms = req.DeadlineMs
	}
	if ms == 0 {
		return DefaultMigrationDeadline
	}
	return time.Duration(ms) * time.Millisecond
}

// migrationLoop answers the migration and reconfiguration requests in
// order, one at a time, until ctx ends: a Quiesce and a Checkpoint never
// interleave.
func (c *Client) migrationLoop(ctx context.Context, q <-chan agentmsg.Message) {
	for {
		var req agentmsg.Message
		select {
		case <-ctx.Done():
			return
		case req = <-q:
		}
		c.mu.Lock()
		m := c.mig
		switch req.(type) {
		case *agentmsg.Checkpoint, *agentmsg.Reconfigure:
			m = c.rec
		}
		c.mu.Unlock()
		status, programs := agentmsg.MigrationOK, uint32(0)
		if m != nil {
			mctx, cancel := context.WithTimeout(ctx, migrationDeadline(req))
			status, programs = m.migrate(mctx, req)
			cancel()
		}
		var reply agentmsg.Message
		switch req := req.(type) {
		case *agentmsg.Quiesce:
			reply = &agentmsg.Quiesced{Cookie: req.Cookie, Status: status, Programs: programs}
		case *agentmsg.Resume:
			reply = &agentmsg.Resumed{Cookie: req.Cookie, Status: status, Programs: programs}
		case *agentmsg.Checkpoint:
			reply = &agentmsg.Checkpointed{Cookie: req.Cookie, Status: status, Programs: programs}
		case *agentmsg.Reconfigure:
			reply = &agentmsg.Reconfigured{Cookie: req.Cookie, Status: status, Programs: programs}
		default:
			continue
		}
		c.log.Debug("agent channel: request answered", "request", req.Type(), "status", status, "programs", programs)
		if err := c.sendReady(ctx, reply); err != nil {
			c.log.Warn("agent channel: answer lost", "type", reply.Type(), "err", err)
		}
	}
}

// sendReady sends m once the channel is up (the peer answered Hello),
// waiting at most replyWait for it.
func (c *Client) sendReady(ctx context.Context, m agentmsg.Message) error {
	ctx, cancel := context.WithTimeout(ctx, replyWait)
	defer cancel()
	for {
		c.mu.Lock()
		rwc, ready, ch := c.rwc, c.ready, c.changed
		c.mu.Unlock()
		if ready && rwc != nil {
			if _, err := rwc.Write(agentmsg.Marshal(m)); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// DriverMigration is the MigrationHandler of a program that uses dev:
// Quiesce is dev.Suspend, or dev.SuspendMapped for a migration in place
// (InPlace); Resume continues on the kept registers when they answer
// (dev.ResumeMapped), and otherwise calls reopen (driver.ReopenGuest in a
// guest) for the device's registers, in both the replugged and the
// abandoned case, and then dev.Resume. A Resume of a device that is not
// suspended (its Quiesce failed, or never came) does nothing.
func DriverMigration(dev *driver.Device, reopen func(ctx context.Context) (driver.Registers, error)) MigrationHandler {
	return driverMigration{dev: dev, reopen: reopen}
}

type driverMigration struct {
	dev    *driver.Device
	reopen func(ctx context.Context) (driver.Registers, error)
}

func (m driverMigration) Quiesce(ctx context.Context) error {
	if InPlace(ctx) {
		return m.dev.SuspendMapped(ctx)
	}
	return m.dev.Suspend(ctx)
}

// Lost abandons the device (driver.Device.Abandon): its calls fail with
// driver.ErrDeviceLost until the program opens the new one.
func (m driverMigration) Lost(context.Context) error {
	m.dev.Abandon()
	return nil
}

func (m driverMigration) Resume(ctx context.Context, _ bool) error {
	if !m.dev.Suspended() {
		return nil
	}
	err := m.dev.ResumeMapped()
	if err == nil {
		return nil
	}
	if !errors.Is(err, driver.ErrInvalid) && !errors.Is(err, driver.ErrNoDevice) {
		return err
	}
	// Suspended with BAR0 unmapped, or BAR0 dark where it was kept (the
	// configuration was not restored): reopen the device.
	regs, err := m.reopen(ctx)
	if err != nil {
		return err
	}
	if err := m.dev.Resume(regs); err != nil {
		if c, ok := regs.(io.Closer); ok {
			c.Close()
		}
		return err
	}
	return nil
}
