package abi

import "fmt"

// MaxContexts is the most device contexts an instance offers besides its
// default one (RegMaxContexts, ABI 1.5): context ids are 1..MaxContexts.
const MaxContexts = 64

// ContextCreate makes device context ID with its own ring (docs/ABI.md
// "context-create", ABI 1.5). Only the default context's ring takes it.
//
//	off size field
//	0   4    context id, 1..RegMaxContexts, not in use
//	4   4    slots: a power of two, 1..MaxRingSlots
//	8   8    ring_gpa: the context's command ring (64-byte aligned)
//	16  8    compl_gpa: its completion array (32-byte aligned)
//	24  8    shadow_gpa: its tail shadow word (4-byte aligned, nonzero)
//	32  8    mem_limit: most device memory its buffers may hold; 0: the instance's quota
//	40  8    poll_word_gpa: its poll word (1.6, FeatureNotify; 8-byte aligned); 0: none (reserved, 0, in 1.5)
type ContextCreate struct {
	ID       uint32
	Slots    uint32
	Ring     uint64
	Compl    uint64
	Shadow   uint64
	MemLimit uint64
	PollWord uint64
}

// Op is OpContextCreate.
func (*ContextCreate) Op() Opcode { return OpContextCreate }

// fields walks the layout above.
func (c *ContextCreate) fields(f fieldCodec) fieldCodec {
	return f.u32(&c.ID).u32(&c.Slots).u64(&c.Ring).u64(&c.Compl).u64(&c.Shadow).u64(&c.MemLimit).u64(&c.PollWord)
}

// check is Check.
func (c *ContextCreate) check(fieldCodec) error { return c.Check() }

// Check reports the first field out of the ranges docs/ABI.md
// "context-create" gives (wrapping ErrMalformed): the payload's own
// checks, for a context that arrives another way (a migration).
func (c *ContextCreate) Check() error {
	switch {
	case c.ID == 0 || c.ID > MaxContexts:
		return fmt.Errorf("context id %d: %w", c.ID, ErrMalformed)
	case c.Slots == 0 || c.Slots > MaxRingSlots || c.Slots&(c.Slots-1) != 0:
		return fmt.Errorf("ring of %d slots: %w", c.Slots, ErrMalformed)
	case c.Ring%CommandSize != 0 || c.Compl%ComplSize != 0:
		return fmt.Errorf("ring %#x or completions %#x misaligned: %w", c.Ring, c.Compl, ErrMalformed)
	case c.Shadow == 0 || c.Shadow%4 != 0:
		return fmt.Errorf("tail shadow at %#x: %w", c.Shadow, ErrMalformed)
	case c.PollWord%8 != 0:
		return fmt.Errorf("poll word at %#x: %w", c.PollWord, ErrMalformed)
	}
	return nil
}

// ContextDestroy ends device context ID (docs/ABI.md "context-destroy",
// ABI 1.5): its pending commands are dropped, its buffers and programs
// freed. Only the default context's ring takes it.
//
//	off size field
//	0   4    context id
type ContextDestroy struct{ ID uint32 }

// Op is OpContextDestroy.
func (*ContextDestroy) Op() Opcode { return OpContextDestroy }

// fields walks the layout above.
func (c *ContextDestroy) fields(f fieldCodec) fieldCodec { return f.u32(&c.ID) }

// check reports an id out of range.
func (c *ContextDestroy) check(fieldCodec) error {
	if c.ID == 0 || c.ID > MaxContexts {
		return fmt.Errorf("context id %d: %w", c.ID, ErrMalformed)
	}
	return nil
}
