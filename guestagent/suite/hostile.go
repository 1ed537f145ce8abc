package suite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// OutsideRAM is a guest-physical address no guest has RAM at.
const OutsideRAM = 1 << 46

// RunHostile plays a hostile guest on d: every bad input must be refused with
// its expected status, and a normal job must still work afterwards.
func RunHostile(ctx context.Context, d *driver.Device, opts Options) Report {
	opts = opts.withDefaults()
	rn := newRunner(ctx, d, "hostile")
	var scratch driver.DMA // one page for scatter-gather tables
	rn.run("dma-page", func() error {
		var err error
		scratch, err = d.Memory().Alloc(abi.PageSize)
		return err
	})
	if len(scratch.Pages) == 0 {
		return rn.report()
	}
	rn.run("foreign-handles", func() error { return foreignHandles(d, scratch) })
	rn.run("bad-address", func() error { return badAddress(d, scratch) })
	rn.run("over-quota", func() error { return overQuota(d) })
	rn.run("garbage-opcode", func() error { return garbage(d) })
	rn.run("ring-overflow", func() error { return ringOverflow(d) })
	rn.run("vector-add-after", func() error {
		p, err := build(d)
		if err != nil {
			return err
		}
		err = vectorAdd(d, p, opts.VectorN, opts.Seed)
		if ferr := d.FreeProgram(p); err == nil {
			err = ferr
		}
		if ferr := d.Finish(); err == nil {
			err = ferr
		}
		return err
	})
	return rn.report()
}

// expect submits cmds in one batch (one doorbell) and checks each
// completion's status.
func expect(d *driver.Device, cmds []abi.Command, want []abi.Status) error {
	idx := make([]uint32, len(cmds))
	for i, c := range cmds {
		n, err := d.SubmitRaw(c)
		if err != nil {
			return err
		}
		idx[i] = n
	}
	if err := d.Flush(); err != nil {
		return err
	}
	var errs []error
	for i, n := range idx {
		rec, err := d.WaitIndex(n)
		switch {
		case err != nil:
			errs = append(errs, err)
		case rec.Status != want[i]:
			errs = append(errs, fmt.Errorf("%v (tag %#x): status %v, want %v", cmds[i].Opcode, cmds[i].Tag, rec.Status, want[i]))
		case rec.Tag != cmds[i].Tag:
			errs = append(errs, fmt.Errorf("%v: completion tag %#x, want %#x", cmds[i].Opcode, rec.Tag, cmds[i].Tag))
		}
	}
	return errors.Join(errs...)
}

// sgTable writes a one-entry table at the start of page and returns its address.
func sgTable(page driver.DMA, addr uint64, n uint32) uint64 {
	e := abi.SGEntry{Addr: addr, Len: n}
	e.Marshal(page.Buf)
	return page.Pages[0]
}

// foreignHandles uses buffer handles 1..16 this guest never created (another
// guest's driver uses the same numbers): they must not be found.
func foreignHandles(d *driver.Device, page driver.DMA) error {
	// Data lands in the second half of the page, the table is at its start.
	sg := sgTable(page, page.Pages[0]+abi.PageSize/2, 16)
	var cmds []abi.Command
	for h := uint32(1); len(cmds) < 32 && h < 1<<20; h++ {
		if d.HandleUsed(h) {
			continue
		}
		cmds = append(cmds,
			abi.NewCommand(&abi.Copy{Handle: h, SGCount: 1, Length: 16, SGAddr: sg}, 0, uint64(h)),
			abi.NewCommand(&abi.Copy{ToDevice: true, Handle: h, SGCount: 1, Length: 16, SGAddr: sg}, 0, uint64(h)<<8),
			abi.NewCommand(&abi.BufferFree{Handle: h}, 0, uint64(h)<<16))
	}
	want := make([]abi.Status, len(cmds))
	for i := range want {
		want[i] = abi.StatusNotFound
	}
	return expect(d, cmds, want)
}

// badAddress copies through scatter-gather lists pointing outside guest RAM.
func badAddress(d *driver.Device, page driver.DMA) (err error) {
	b, err := d.CreateBuffer(abi.PageSize)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, d.Free(b), d.Finish())
	}()
	if err := d.Finish(); err != nil {
		return fmt.Errorf("create buffer: %w", err)
	}
	sg := sgTable(page, OutsideRAM, abi.PageSize)
	cmds := []abi.Command{
		abi.NewCommand(&abi.Copy{ToDevice: true, Handle: b.Handle, SGCount: 1, Length: abi.PageSize, SGAddr: sg}, 0, 0xa1),
		abi.NewCommand(&abi.Copy{Handle: b.Handle, SGCount: 1, Length: abi.PageSize, SGAddr: sg}, 0, 0xa2),
		abi.NewCommand(&abi.Copy{ToDevice: true, Handle: b.Handle, SGCount: 1, Length: abi.PageSize, SGAddr: OutsideRAM}, 0, 0xa3),
		abi.NewCommand(&abi.Fence{Addr: OutsideRAM, Value: 1}, 0, 0xa4),
	}
	return expect(d, cmds, []abi.Status{abi.StatusBadAddress, abi.StatusBadAddress, abi.StatusBadAddress, abi.StatusBadAddress})
}

// overQuota allocates one byte more than the profile's memory, in buffers
// no larger than the device's largest allocation: the last must be refused.
func overQuota(d *driver.Device) error {
	in := d.Info()
	if in.MemSize == 0 {
		return fmt.Errorf("device reports no memory quota")
	}
	maxAlloc := in.MaxAlloc
	if maxAlloc == 0 || maxAlloc > in.MemSize+1 {
		maxAlloc = in.MemSize + 1
	}
	if (in.MemSize+1)/maxAlloc > 4096 {
		return fmt.Errorf("quota %d needs more than 4096 buffers of %d bytes", in.MemSize, maxAlloc)
	}
	var bs []driver.Buffer
	for total := uint64(0); total <= in.MemSize; {
		b, err := d.CreateBuffer(min(maxAlloc, in.MemSize+1-total))
		if err != nil {
			return err
		}
		bs = append(bs, b)
		total += b.Size
	}
	err := d.Finish()
	var ce *driver.CommandError
	if !errors.As(err, &ce) || ce.Status != abi.StatusQuotaExceeded || ce.Opcode != abi.OpBufferCreate {
		return fmt.Errorf("%d buffers totalling %d bytes over a %d byte quota: got %v, want %v on the last create",
			len(bs), in.MemSize+1, in.MemSize, err, abi.StatusQuotaExceeded)
	}
	for _, b := range bs[:len(bs)-1] {
		if err := d.Free(b); err != nil {
			return err
		}
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("free the buffers within quota: %w", err)
	}
	return nil
}

// garbage sends an undefined opcode and undefined flags.
func garbage(d *driver.Device) error {
	cmds := []abi.Command{
		{Opcode: 0x7777, Tag: 0xbad1},
		{Opcode: abi.Opcode(abi.NumOpcodes), Tag: 0xbad2},
		{Opcode: abi.OpNop, Flags: 0x8000, Tag: 0xbad3},
		{Opcode: abi.OpNop, Tag: 0x600d},
	}
	return expect(d, cmds, []abi.Status{abi.StatusInvalidOpcode, abi.StatusInvalidOpcode, abi.StatusInvalidArgument, abi.StatusOK})
}

// ringOverflow rings the doorbell beyond the ring: RegError must say so, and
// after the acknowledgement the ring must keep working.
func ringOverflow(d *driver.Device) error {
	if err := d.Finish(); err != nil {
		return fmt.Errorf("before: %w", err)
	}
	regs := d.Regs()
	head := regs.Read32(abi.RegRingHead)
	d.RingDoorbell(head + uint32(d.Slots()) + 5)
	deadline := time.Now().Add(10 * time.Second)
	var s abi.Status
	for {
		if s = abi.Status(regs.Read32(abi.RegError)); s != abi.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if s != abi.StatusRingOverflow {
		return fmt.Errorf("error register after a doorbell at head %d + %d slots + 5: %v, want %v", head, d.Slots(), s, abi.StatusRingOverflow)
	}
	if st := regs.Read32(abi.RegStatus); st&abi.StatusBitError == 0 {
		return fmt.Errorf("status register %#x lacks the error bit while the error register says %v", st, s)
	}
	d.AckError()
	if s := abi.Status(regs.Read32(abi.RegError)); s != abi.StatusOK {
		return fmt.Errorf("error register after acknowledgement: %v, want %v", s, abi.StatusOK)
	}
	// The ring must still run commands.
	if err := expect(d, []abi.Command{{Opcode: abi.OpNop, Tag: 0x0f}}, []abi.Status{abi.StatusOK}); err != nil {
		return fmt.Errorf("after overflow: %w", err)
	}
	return d.Finish()
}
