package driver

import (
	"fmt"
	"log/slog"

	"github.com/vgpud/vgpud/abi"
)

// Device contexts (ABI 1.5, docs/ABI.md "Device contexts"). A context is
// driven by a Device of its own: the same calls (buffers, programs,
// launches, copies, Finish) on its own ring, completion page, staging
// pool and handle spaces, rung by storing the tail in its shadow word
// and writing its id to abi.RegContextKick. Its parent, the Device of
// the default ring, makes and destroys it. A server that serves several
// processes on one vGPU (vgpu-icdd) gives each process a context, so
// that one process's kernels reach none of another's buffers and a
// crash ends only that process's context.

// ContextOptions configure OpenContext.
type ContextOptions struct {
	// ID is the context's id, 1..Info().MaxContexts.
	ID uint32
	// MemLimit bounds the device memory the context's buffers may hold
	// (0: only the instance's quota, shared by every context).
	MemLimit uint64
	// StagingBytes is the size of the context's staging pool; 0 means
	// DefaultContextStagingBytes. Smaller values are raised to one page
	// per ring slot; a program source must fit in it with its tables.
	StagingBytes int
	// NoNotify: the context's ring is kicked every time, with no poll
	// word (Options.NoNotify; a parent opened with it gives its contexts
	// none either).
	NoNotify bool
	// Logger receives debug logs; nil: the parent's.
	Logger *slog.Logger
}

// DefaultContextStagingBytes is a context's staging pool unless
// ContextOptions says: room for a 1 MiB program source.
const DefaultContextStagingBytes = 1<<20 + 16*abi.PageSize

// OpenContext makes a device context on d's vGPU and returns the Device
// that drives it. It fails with ErrUnsupported on a device without
// abi.FeatureContexts and with a *CommandError when the device refuses
// (StatusInvalidArgument for an id beyond RegMaxContexts, StatusExists
// for a live id, StatusOutOfResources when the host cannot make it).
func (d *Device) OpenContext(opts ContextOptions) (*Device, error) {
	info := d.Info()
	if info.Features&abi.FeatureContexts == 0 || info.MaxContexts == 0 {
		return nil, fmt.Errorf("open context %d: the device offers no device contexts: %w", opts.ID, ErrUnsupported)
	}
	if opts.ID == 0 || opts.ID > info.MaxContexts {
		return nil, fmt.Errorf("open context %d: the device offers ids 1..%d: %w", opts.ID, info.MaxContexts, ErrInvalid)
	}
	if opts.StagingBytes == 0 {
		opts.StagingBytes = DefaultContextStagingBytes
	}
	c := &Device{regs: d.Regs(), mem: d.mem, opts: d.opts, log: opts.Logger, results: map[uint64]abi.Completion{},
		info: info, parent: d, ctxID: opts.ID, memLimit: opts.MemLimit}
	c.opts.StagingBytes = max(opts.StagingBytes, int(d.slots)*abi.PageSize)
	c.opts.NoNotify = d.opts.NoNotify || opts.NoNotify
	if c.log == nil {
		c.log = d.log.With("context", opts.ID)
	}
	c.slots = d.slots
	c.inflight = make([]entry, c.slots)
	fixed, err := allocPages(d.mem, 3*abi.PageSize)
	if err != nil {
		return nil, fmt.Errorf("open context %d: ring pages: %w", opts.ID, err)
	}
	c.ring, c.compl, c.fence = fixed[0], fixed[1], fixed[2]
	if c.free, err = allocPages(d.mem, c.opts.StagingBytes); err != nil {
		return nil, fmt.Errorf("open context %d: staging pool: %w", opts.ID, err)
	}
	c.poolSize = len(c.free)
	if err := c.createContext(); err != nil {
		return nil, err
	}
	d.kidsMu.Lock()
	if d.kids == nil {
		d.kids = map[*Device]struct{}{}
	}
	d.kids[c] = struct{}{}
	d.kidsMu.Unlock()
	c.log.Debug("vgpu context open", "slots", c.slots, "staging_pages", c.poolSize, "mem_limit", opts.MemLimit)
	return c, nil
}

// createContext clears the context's ring pages and asks the parent's
// ring to make it. Caller owns c (or holds c.mu).
func (c *Device) createContext() error {
	for _, p := range []page{c.ring, c.compl, c.fence} {
		clear(p.buf)
	}
	c.next, c.rung, c.reaped = 0, 0, 0
	c.kick = true
	c.skipped = false
	c.parentResets = c.parent.resets.Load()
	cc := abi.ContextCreate{ID: c.ctxID, Slots: uint32(c.slots),
		Ring: c.ring.gpa, Compl: c.compl.gpa, Shadow: c.compl.gpa + tailShadowOffset, MemLimit: c.memLimit}
	// A poll word (ABI 1.6) where the parent's device offers one; the
	// page was just cleared, so it reads idle.
	c.notify = !c.opts.NoNotify && c.parent.info.Features&abi.FeatureNotify != 0
	if c.notify {
		cc.PollWord = c.compl.gpa + pollWordOffset
	}
	_, err := c.parent.submitSync(abi.NewCommand(&cc, 0, 0))
	if err != nil {
		return fmt.Errorf("open context %d: %w", c.ctxID, err)
	}
	return nil
}

// forget takes a closed context out of its parent's.
func (c *Device) forget() {
	c.parent.kidsMu.Lock()
	delete(c.parent.kids, c)
	c.parent.kidsMu.Unlock()
}

// destroyContext asks the parent's ring to end the context.
func (c *Device) destroyContext() error {
	if _, err := c.parent.submitSync(abi.NewCommand(&abi.ContextDestroy{ID: c.ctxID}, 0, 0)); err != nil {
		return fmt.Errorf("destroy context %d: %w", c.ctxID, err)
	}
	return nil
}

// Context returns the device context d drives (0: the default ring).
func (d *Device) Context() uint32 { return d.ctxID }

// submitSync submits one command on d's ring, rings and waits for it.
func (d *Device) submitSync(c abi.Command) (abi.Completion, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return abi.Completion{}, err
	}
	c.Tag = d.next
	idx, err := d.submit(c, entry{sync: true})
	if err != nil {
		return abi.Completion{}, err
	}
	d.flush()
	return d.waitOK(idx)
}
