package child

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker/wire"
)

// extract writes one migration round of an instance to fd (a pipe the
// main process reads) as a complete migration stream: Header, the round's
// records, End (docs/worker.md "Migration").
func (s *server) extract(m *wire.Extract, fd int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "extract")
	defer f.Close()
	var st aggregator.RoundStats
	var guest uint64
	err := s.withSlot(m.Slot, func(sl *slot) error {
		bw := bufio.NewWriterSize(f, 256<<10)
		w := stream.NewWriter(bw)
		var err error
		if st, err = sl.in.ExtractRound(s.ctx, streamSink{w}, m.Final); err != nil {
			return err
		}
		if m.Final && sl.mem.Logging() {
			if guest, err = sl.sendWritten(w); err != nil {
				return err
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return nil, err
	}
	r := wire.ExtractReply{Programs: uint32(st.Programs), ProgramsFreed: uint32(st.ProgramsFreed), Buffers: uint32(st.Buffers),
		BuffersFreed: uint32(st.BuffersFreed), Redirty: uint32(st.Redirty), BufferBytes: st.BufferBytes, GuestBytes: guest}
	return r.EncodeBody(), nil
}

// streamSink turns what an extraction round yields into stream records.
type streamSink struct{ w *stream.Writer }

func (k streamSink) Program(p aggregator.ProgramState) error {
	return k.w.Write(&stream.Program{Handle: p.Handle, Flags: p.Flags, Source: []byte(p.Source), Options: []byte(p.Options)})
}
func (k streamSink) ProgramFree(h uint32) error { return k.w.Write(&stream.ProgramFree{Handle: h}) }
func (k streamSink) Buffer(b aggregator.BufferState) error {
	return k.w.Write(&stream.Buffer{Handle: b.Handle, Flags: b.Flags, Size: b.Size})
}
func (k streamSink) BufferData(h uint32, off uint64, data []byte) error {
	return k.w.BufferData(h, off, data)
}
func (k streamSink) BufferFree(h uint32) error { return k.w.Write(&stream.BufferFree{Handle: h}) }
func (k streamSink) Context(c aggregator.ContextState) error {
	return k.w.Write(&stream.Context{ID: c.ID, Destroyed: c.Destroyed, Slots: c.Slots, Ring: c.Ring, Compl: c.Compl,
		Shadow: c.Shadow, MemLimit: c.MemLimit})
}
func (k streamSink) Ring(r aggregator.RingState) error {
	return k.w.Write(&stream.Ring{Enabled: r.Enabled, Slots: r.Slots, Base: r.Base, ComplBase: r.ComplBase,
		Head: r.Head, Tail: r.Tail, Completed: r.Completed, ErrStatus: r.ErrStatus, ErrCount: r.ErrCount})
}

// inject applies a migration stream read from fd (a pipe the main process
// writes) to a frozen instance. The stream is untrusted (it came from
// another host): the stream package checks its framing, the aggregator
// every value, as it does a guest's.
func (s *server) inject(m *wire.Inject, fd int) error {
	f := os.NewFile(uintptr(fd), "inject")
	defer f.Close()
	return s.withSlot(m.Slot, func(sl *slot) error {
		if !sl.in.Frozen() {
			return abi.Errorf(abi.StatusBusy, "inject into instance %s, which is not frozen", sl.id)
		}
		r := stream.NewReader(bufio.NewReaderSize(f, 256<<10))
		// in is where the records go: the instance, or the device
		// context the last Context record named.
		in := sl.in
		for n := 0; ; n++ {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return abi.Errorf(abi.StatusInvalidArgument, "migration stream: %v", err)
			}
			switch rec := rec.(type) {
			case *stream.Header, *stream.End:
			case *stream.Program:
				err = in.InjectProgram(s.ctx, aggregator.ProgramState{Handle: rec.Handle, Flags: rec.Flags, Source: string(rec.Source), Options: string(rec.Options)})
			case *stream.ProgramFree:
				err = in.InjectProgramFree(s.ctx, rec.Handle)
			case *stream.Buffer:
				err = in.InjectBuffer(s.ctx, aggregator.BufferState{Handle: rec.Handle, Flags: rec.Flags, Size: rec.Size})
			case *stream.BufferData:
				err = in.InjectBufferData(s.ctx, rec.Handle, rec.Offset, rec.Data)
			case *stream.BufferFree:
				err = in.InjectBufferFree(s.ctx, rec.Handle)
			case *stream.Context:
				in, err = sl.in.InjectContext(s.ctx, aggregator.ContextState{ID: rec.ID, Destroyed: rec.Destroyed, Slots: rec.Slots,
					Ring: rec.Ring, Compl: rec.Compl, Shadow: rec.Shadow, MemLimit: rec.MemLimit})
				if err != nil {
					in = sl.in
				}
			case *stream.GuestPages:
				err = sl.arrive(rec)
			case *stream.Ring:
				err = in.InjectRing(s.ctx, aggregator.RingState{Enabled: rec.Enabled, Base: rec.Base, ComplBase: rec.ComplBase, Slots: rec.Slots,
					Head: rec.Head, Tail: rec.Tail, Completed: rec.Completed, ErrStatus: rec.ErrStatus, ErrCount: rec.ErrCount})
			default:
				err = abi.Errorf(abi.StatusInvalidArgument, "a worker takes no %v record", rec.Type())
			}
			if err != nil {
				return fmt.Errorf("migration record %d (%v): %w", n, rec.Type(), err)
			}
		}
	})
}

// sendWritten ends a final round with the guest pages the worker wrote
// since its write log was turned on (wire.GuestLog), read now, with the
// ring frozen and the VM stopped, as GuestPages records of contiguous
// runs; the log goes off. It returns the bytes sent.
func (sl *slot) sendWritten(w *stream.Writer) (uint64, error) {
	pages := sl.mem.TakeWritten()
	sl.mem.LogWrites(false)
	var sent uint64
	for len(pages) > 0 {
		n := 1
		for n < len(pages) && n < stream.MaxChunk/stream.GuestPageSize && pages[n] == pages[0]+uint64(n)*stream.GuestPageSize {
			n++
		}
		data := make([]byte, n*stream.GuestPageSize)
		if err := sl.mem.ReadAt(data, pages[0]); err != nil {
			return sent, fmt.Errorf("guest pages written during the migration: %w", err)
		}
		if err := w.Write(&stream.GuestPages{GPA: pages[0], Data: data}); err != nil {
			return sent, err
		}
		sent += uint64(len(data))
		pages = pages[n:]
	}
	return sent, nil
}

// arrive holds an incoming GuestPages record's pages for the next Thaw.
// Each must lie in the instance's guest RAM as mapped now; a page that
// arrives twice keeps its last content, so what is held never exceeds
// the guest's RAM.
func (sl *slot) arrive(g *stream.GuestPages) error {
	if err := sl.mem.Inside(g.GPA, uint64(len(g.Data))); err != nil {
		return fmt.Errorf("guest pages at %#x: %w", g.GPA, err)
	}
	sl.arrivedMu.Lock()
	defer sl.arrivedMu.Unlock()
	if sl.arrived == nil {
		sl.arrived = map[uint64][]byte{}
	}
	for off := 0; off < len(g.Data); off += stream.GuestPageSize {
		sl.arrived[g.GPA+uint64(off)] = g.Data[off : off+stream.GuestPageSize]
	}
	return nil
}

// writeArrived writes the guest pages an incoming migration brought into
// guest RAM (Thaw: QEMU has loaded the VM, which has not run yet) and
// forgets them.
func (sl *slot) writeArrived() error {
	sl.arrivedMu.Lock()
	defer sl.arrivedMu.Unlock()
	for gpa, p := range sl.arrived {
		if err := sl.mem.WriteAt(p, gpa); err != nil {
			return fmt.Errorf("write the guest pages that migrated: %w", err)
		}
		delete(sl.arrived, gpa)
	}
	return nil
}
