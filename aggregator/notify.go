package aggregator

import (
	"encoding/binary"

	"github.com/vgpud/vgpud/abi"
)

// Notification suppression (issue 42, ABI 1.6, docs/ABI.md "Poll word").
//
// A doorbell costs the guest a trapped access (or an ioeventfd) and
// vgpud's main process a wake-up before the worker sees the new tail,
// even while the worker's ring loop is polling its instance page for it.
// A guest that programs a poll word and a tail shadow before it enables
// its ring learns when it need not ring: while the default ring's loop
// polls (poll.go), it stores abi.PollWordPolling in the poll word and
// reads the tail shadow at every look; before it stops looking (its
// window ran out, the ring is frozen) it stores abi.PollWordIdle and
// looks once more. The guest stores its tail in the shadow, then reads
// the poll word, and kicks only if it reads idle. Both sides store their
// own word before they load the other's with full barriers (the guest's
// store is an atomic exchange; Store64 here is one), so a tail is either
// kicked or seen by the loop's last look.
//
// The guest's words are untrusted: a tail read from the shadow is
// applied exactly as a kicked one (publish checks it), and is looked at
// only when it changed, so a garbage shadow latches one error per change,
// as garbage doorbells do. A guest that writes the poll word itself only
// skips its own kicks and delays its own commands (its driver kicks
// anyway before it blocks). The device writes the poll word only while
// the ring is enabled and not frozen, under mu, and stores idle before a
// disable, reset, freeze or close returns: after that the guest may
// reuse the memory, and a migration's copy of guest RAM, which does not
// see the device's writes, finds idle there.

// notifyOK checks the tail shadow and poll word of cfg: both guest RAM,
// aligned, and not each other.
func (in *Instance) notifyOK(cfg RingConfig) error {
	if cfg.PollWord == 0 {
		return nil
	}
	if cfg.PollWord%8 != 0 || cfg.Shadow == 0 || cfg.Shadow%4 != 0 || overlaps(cfg.Shadow, 4, cfg.PollWord, 8) {
		return abi.Errorf(abi.StatusBadAddress, "poll word %#x (8-byte aligned) with tail shadow %#x (4-byte aligned, nonzero)", cfg.PollWord, cfg.Shadow)
	}
	var b [8]byte
	if err := in.mem.ReadAt(b[:], cfg.PollWord); err != nil {
		return abi.Errorf(abi.StatusBadAddress, "poll word: %v", err)
	}
	if err := in.mem.ReadAt(b[:4], cfg.Shadow); err != nil {
		return abi.Errorf(abi.StatusBadAddress, "tail shadow: %v", err)
	}
	return nil
}

// guestPolling stores in the guest's poll word whether the ring's loop
// (the default ring's or a device context's) polls (on) or is about to stop looking (off), if the guest
// programmed one and the ring may be told so. It reports whether the word
// said polling before.
func (in *Instance) guestPolling(on bool) (was bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	was = in.pollWordOn
	if on && (!in.enabled || in.frozen || in.ring.PollWord == 0) {
		return was
	}
	if on != was {
		in.storePollWordLocked(on)
	}
	return was
}

// storePollWordLocked stores on in the poll word. A word that cannot be
// stored (the guest's memory changed under it) is given up: the guest
// then reads whatever it left there, and its driver kicks before it
// blocks. Caller holds mu.
func (in *Instance) storePollWordLocked(on bool) {
	v := uint64(abi.PollWordIdle)
	if on {
		v = abi.PollWordPolling
	}
	if err := in.mem.Store64(in.ring.PollWord, v); err != nil {
		in.log.Warn("poll word given up", "gpa", in.ring.PollWord, "err", err)
		in.ring.PollWord, in.ring.Shadow = 0, 0
		in.pollWordOn = false
		return
	}
	in.pollWordOn = on
}

// idlePollWordLocked stores idle in the poll word if it says polling:
// before the ring stops, resets, freezes or closes. Caller holds mu.
func (in *Instance) idlePollWordLocked() {
	if in.pollWordOn {
		in.storePollWordLocked(false)
	}
}

// PollShadows is PollShadow of the default ring and of each live device
// context (ABI 1.6: a context's poll word comes with its context-create):
// the page poller's, which latches what they refuse on the instance.
func (in *Instance) PollShadows() error {
	err := in.PollShadow()
	var buf [abi.MaxContexts]*Instance // no allocation per look
	ctxs := buf[:0]
	in.ctxMu.Lock()
	for _, c := range in.contexts {
		ctxs = append(ctxs, c)
	}
	in.ctxMu.Unlock()
	for _, c := range ctxs {
		if cerr := c.PollShadow(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// PollShadow applies the tail the guest stored in its tail shadow, if it
// changed since the last look, when the guest may skip kicks (it
// programmed a poll word): the page poller calls it at every look, and
// after every signal, serialised with the kicks it applies.
func (in *Instance) PollShadow() error {
	// One look at a time: a later look must not apply an older tail.
	in.shadowMu.Lock()
	defer in.shadowMu.Unlock()
	in.mu.Lock()
	shadow, seen := in.ring.Shadow, in.shadowSeen
	if !in.enabled || in.ring.PollWord == 0 || shadow == 0 {
		in.mu.Unlock()
		return nil
	}
	in.mu.Unlock()
	var b [4]byte
	if err := in.mem.ReadAt(b[:], shadow); err != nil {
		return abi.Errorf(abi.StatusBadAddress, "tail shadow at %#x: %v", shadow, err)
	}
	tail := binary.LittleEndian.Uint32(b[:])
	if tail == seen {
		return nil
	}
	in.mu.Lock()
	if tail == in.shadowSeen || !in.enabled {
		in.mu.Unlock()
		return nil // another look took it
	}
	in.shadowSeen = tail
	same := tail == in.tail
	in.mu.Unlock()
	if same {
		return nil // kicked already
	}
	in.page().sh.ShadowTails.Add(1)
	return in.publish(tail)
}
