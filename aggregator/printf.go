package aggregator

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

// printing is a launch's printf buffer (docs/ABI.md "Printf output", ABI
// 1.7) and, once it ran, what the kernel printed.
type printing struct {
	buf      *buffer
	out      gpu.Printout
	captured bool // the queue captured the output (a gpu.Printer that could)
}

// printfBuffer checks a launch's printf field: a live buffer with room for
// the header.
func (in *Instance) printfBuffer(h uint32) (*printing, error) {
	b, ok := in.state.buffers[h]
	if !ok {
		return nil, abi.Errorf(abi.StatusNotFound, "printf buffer %d", h)
	}
	if b.size < abi.PrintfHeaderSize {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "printf buffer %d of %d bytes: the header takes %d", h, b.size, abi.PrintfHeaderSize)
	}
	return &printing{buf: b}, nil
}

// launchOnce runs one launch (or slice) on the instance's queue; with pt,
// through the queue's gpu.Printer, keeping what the kernel printed in pt.
// A queue that cannot capture runs the launch plainly and pt says so.
func (in *Instance) launchOnce(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, pt *printing) (time.Duration, error) {
	if pt == nil {
		return in.queue.Launch(k, r, args)
	}
	if p, ok := in.queue.(gpu.Printer); ok {
		n := int(min(pt.buf.size-abi.PrintfHeaderSize, math.MaxInt32))
		t, out, err := p.LaunchPrinting(k, r, args, n)
		if !errors.Is(err, gpu.ErrUnsupported) {
			pt.out, pt.captured = out, err == nil
			return t, err
		}
	}
	return in.queue.Launch(k, r, args)
}

// writePrintout writes a launch's printf header and output at the start of
// its printf buffer, as the device's own write: the buffer's host-held
// content is written to the device first (only a prefix is replaced),
// what reuse knew of its content is forgotten, and a migration's next
// round sends it again.
func (in *Instance) writePrintout(pt *printing) error {
	b := pt.buf
	in.settle(b, true)
	if err := in.materialise(b); err != nil {
		return err
	}
	b.known, b.lazy, b.repeat = false, nil, false
	data := pt.out.Data
	if room := b.size - abi.PrintfHeaderSize; uint64(len(data)) > room {
		// A queue gives at most what was asked; a longer answer is cut,
		// never written past the buffer.
		pt.out.Dropped += uint64(len(data)) - room
		data = data[:room]
	}
	h := abi.PrintfHeader{}
	if pt.captured {
		h = abi.PrintfHeader{Length: uint64(len(data)), Dropped: uint32(min(pt.out.Dropped, math.MaxUint32)), Flags: abi.PrintfCaptured}
	}
	p := make([]byte, abi.PrintfHeaderSize+len(data))
	h.Marshal(p)
	copy(p[abi.PrintfHeaderSize:], data)
	err := in.run(in.copyWork(uint64(len(p))), func() (time.Duration, error) {
		return 0, in.queue.Write(b.mem, 0, p)
	})
	in.touch(b)
	if err != nil {
		return fmt.Errorf("write %d bytes: %w", len(p), err)
	}
	return nil
}
