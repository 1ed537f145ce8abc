package mmio

import "github.com/vgpud/vgpud/abi"

// RegState is what the register file latched: the ring the guest
// programmed, the last tail, the interrupt status and enable, and whether
// the next reset spares the backend. An upgrade in place carries it to
// the new process (docs/upgrade.md).
type RegState struct {
	RingBase, ComplBase uint64
	Slots, Tail         uint32
	Keep                bool
	IntStatus           uint32
	IntEnable           uint32
	Shadow              uint64 // RegTailShadowLo/Hi (ABI 1.3)
	PollWord            uint64 // RegPollWordLo/Hi (ABI 1.6)
}

// State returns the latched registers.
func (d *Device) State() RegState {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.irq.mu.Lock()
	defer d.irq.mu.Unlock()
	return RegState{RingBase: d.ringBase, ComplBase: d.complBase, Slots: d.slots, Tail: d.tail, Keep: d.keep,
		IntStatus: d.irq.status, IntEnable: d.irq.enable, Shadow: d.shadow, PollWord: d.pollWord}
}

// SetState latches s (a fresh register file taking over an instance whose
// backend already runs); it asserts nothing: the line is raised, if it is
// high, when a transport attaches (INTx.SetSink).
func (d *Device) SetState(s RegState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ringBase, d.complBase, d.slots, d.tail, d.keep, d.shadow, d.pollWord = s.RingBase, s.ComplBase, s.Slots, s.Tail, s.Keep, s.Shadow, s.PollWord
	d.irq.mu.Lock()
	d.irq.status, d.irq.enable = s.IntStatus&abi.IntAll, s.IntEnable&abi.IntAll
	d.irq.pending.Store(d.irq.status&d.irq.enable != 0)
	d.irq.mu.Unlock()
}

// Image returns the config space's bytes.
func (c *ConfigSpace) Image() [ConfigSize]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.image
}

// SetImage replaces the config space's bytes with img, keeping the
// read-only bits this vgpud defines (a guest only ever changed writable
// ones); the INTx disable bit reaches the line at SetINTx.
func (c *ConfigSpace) SetImage(img [ConfigSize]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range img {
		c.image[i] = c.image[i]&^c.wmask[i] | img[i]&c.wmask[i]
	}
}
