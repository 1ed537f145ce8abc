package driver

import (
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// Tracked commands: asynchronous variants whose completion goes to a
// callback that owns the command's status (entry.owned), for a caller that
// multiplexes several clients on one device and attributes each failure to
// its client (guestagent/icdserver). A failed status given to a callback is
// not kept for the next Finish.
//
// Callbacks run with the device's mutex held, on whichever goroutine reaps
// the completion (a wait, a full ring, Reap): they must be short and must
// not call the Device. A callback is called exactly once for a method that
// returned nil, and never for one that returned an error.

// CreateBufferNotify is CreateBufferFlags whose completion goes to done.
func (d *Device) CreateBufferNotify(size uint64, flags uint32, done func(abi.Completion)) (Buffer, error) {
	return d.createBuffer(size, flags, ownedEntry(done))
}

// FreeNotify is Free whose completion goes to done.
func (d *Device) FreeNotify(b Buffer, done func(abi.Completion)) error {
	return d.free1(b, ownedEntry(done))
}

// FreeProgramNotify is FreeProgram whose completion goes to done.
func (d *Device) FreeProgramNotify(p Program, done func(abi.Completion)) error {
	return d.freeProgram(p, ownedEntry(done))
}

// LaunchNotify is LaunchFlags whose completion goes to done; the
// completion's Detail is the kernel's execution time in nanoseconds.
func (d *Device) LaunchNotify(p Program, kernel string, r NDRange, flags uint16, args []Arg, done func(abi.Completion)) error {
	return d.launch(p, kernel, r, flags, Buffer{}, args, ownedEntry(done))
}

// LaunchPrintfNotify is LaunchNotify with a printf buffer (LaunchPrintf).
func (d *Device) LaunchPrintfNotify(p Program, kernel string, r NDRange, flags uint16, printf Buffer, args []Arg, done func(abi.Completion)) error {
	if printf.Handle == 0 {
		return fmt.Errorf("launch %s: printf buffer 0: %w", kernel, ErrInvalid)
	}
	return d.launch(p, kernel, r, flags, printf, args, ownedEntry(done))
}

// Marker submits a fence whose completion goes to done: it completes once
// the device has completed every command submitted before it.
func (d *Device) Marker(done func(abi.Completion)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	v := d.fenceVal + 1
	if _, err := d.submit(abi.NewCommand(&abi.Fence{Addr: d.fence.gpa, Value: v}, 0, d.next), ownedEntry(done)); err != nil {
		return fmt.Errorf("marker: %w", err)
	}
	d.fenceVal = v
	return nil
}

func ownedEntry(done func(abi.Completion)) entry {
	return entry{onDone: done, owned: done != nil}
}

// joined gathers the completions of the chunks of one transfer into one
// call of done: the first failed record, or the last one. Guarded by the
// device's mutex (callbacks run under it).
type joined struct {
	left      int  // chunks not yet completed
	submitted bool // every chunk is in the ring
	abandoned bool // a chunk could not be submitted: report nothing
	rec       abi.Completion
	failed    bool
	done      func(abi.Completion)
}

func (j *joined) complete(c abi.Completion) {
	j.left--
	if !j.failed {
		j.rec = c
		j.failed = c.Status != abi.StatusOK
	}
	j.finish()
}

func (j *joined) finish() {
	if j.left == 0 && j.submitted && !j.abandoned && j.done != nil {
		j.done(j.rec)
		j.done = nil
	}
}

// WriteNotify is Write whose completion goes to done, once for every copy
// command the write is split into: done gets the first failed record, or
// the last one.
func (d *Device) WriteNotify(b Buffer, off uint64, data []byte, done func(abi.Completion)) error {
	return d.transfer(true, b, off, data, done)
}

// ReadAsync copies len(dst) bytes of b at off into dst asynchronously: the
// bytes are copied from the staging pages into dst when each chunk's
// completion is reaped, and done is called once every chunk has completed
// (as for WriteNotify). dst must stay valid until done has been called. On
// a failed chunk dst's part is left as it was.
func (d *Device) ReadAsync(b Buffer, off uint64, dst []byte, done func(abi.Completion)) error {
	return d.transfer(false, b, off, dst, done)
}

func (d *Device) transfer(toDev bool, b Buffer, off uint64, data []byte, done func(abi.Completion)) error {
	what := "read"
	if toDev {
		what = "write"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if err := checkRange(b, off, len(data)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := d.stale("buffer", b.Handle, b.gen); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	j := &joined{done: done}
	chunk := d.chunkBytes()
	for pos := 0; pos < len(data); pos += chunk {
		part := data[pos:min(pos+chunk, len(data))]
		j.left++
		idx, err := d.copyChunk(toDev, b.Handle, off+uint64(pos), part, false, func(c abi.Completion, ps []page) {
			if !toDev && c.Status == abi.StatusOK && !j.abandoned {
				for i, p := range ps {
					copy(part[i*abi.PageSize:], p.buf)
				}
			}
			j.complete(c)
		})
		if err != nil {
			j.abandoned = true
			return fmt.Errorf("%s buffer %d at %d: %w", what, b.Handle, off+uint64(pos), err)
		}
		d.inflight[idx%d.slots].owned = true // done owns the status
	}
	j.submitted = true
	j.finish()
	return nil
}

// Reap reaps every command whose completion has already landed, without
// waiting or ringing the doorbell, running their callbacks. It returns the
// number reaped. A server calls it often so that it sees completions (and
// timestamps them) promptly.
func (d *Device) Reap() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	if d.abandoned.Load() {
		return 0, d.lostErr()
	}
	if d.lost {
		return 0, fmt.Errorf("reap: %w: reset the device (Reopen) to continue", ErrDeviceLost)
	}
	n := 0
	for d.reaped < d.next && d.complSeq(d.reaped) == abi.SeqOf(d.reaped) {
		if err := d.reapOne(); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 && d.reaped < d.next {
		// Nothing landed: a lost device never completes what is in
		// flight, so look (at most every lostCheck) and fail it all.
		if err := d.deviceLost(); err != nil {
			return 0, fmt.Errorf("reap: %w", err)
		}
	}
	return n, nil
}

// Lost reports whether the device has reported its context lost
// (StatusDeviceLost, noticed while waiting or reaping) or was abandoned:
// every call fails with ErrDeviceLost until Reopen.
func (d *Device) Lost() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost || d.abandoned.Load()
}

// CheckLost reads RegError once (one trapped register read) and, when the
// device reports its context lost, fails every command in flight as a
// wait would; it reports whether the device is lost. A server calls it
// before handing the device to a new client, so that the client gets a
// reset device rather than a dead ring. While another call holds the
// device (a build, a wait: they look at RegError themselves) it does not
// wait for it and reports what is known.
func (d *Device) CheckLost() bool {
	if !d.mu.TryLock() {
		return d.abandoned.Load()
	}
	defer d.mu.Unlock()
	if d.lost || d.abandoned.Load() {
		return true
	}
	if d.closed || d.Suspended() {
		return false
	}
	d.lostAt = time.Time{}
	return d.deviceLost() != nil
}

// LostSeen reports, without waiting for a call in progress, whether the
// driver has seen the device context lost and not yet reopened it (or
// abandoned it). Unlike CheckLost it reads no register: it tells what a
// reaper or a wait already noticed, while they may still hold the device.
func (d *Device) LostSeen() bool { return d.lostSeen.Load() || d.abandoned.Load() }

// Pending returns the number of commands submitted and not yet reaped.
func (d *Device) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int(d.next - d.reaped)
}
