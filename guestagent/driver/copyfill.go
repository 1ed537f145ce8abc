package driver

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

// ABI 1.4 commands: program-info, buffer-copy, buffer-fill and device-info
// (docs/ABI.md "program-info", "buffer-copy", "buffer-fill", "device-info"). Each method fails with
// ErrUnsupported, submitting nothing, on a device whose ABI minor version is
// below 4.

// minorABI14 is the first ABI minor version with the commands of this file.
const minorABI14 = 4

// needMinor fails with ErrUnsupported when the device's ABI (as read at Open
// or the last Resume) is older than 1.minor.
func (d *Device) needMinor(what string, minor uint32) error {
	v := d.Info().Version
	if v&0xffff < minor {
		return fmt.Errorf("%s: device abi %d.%d, needs %d.%d: %w", what, v>>16, v&0xffff, abi.VersionMajor, minor, ErrUnsupported)
	}
	return nil
}

// programInfoTries bounds how often ProgramInfo asks again with more room:
// a program's blob never changes, so the second answer fits; more tries
// only cover a device that changed under a migration meanwhile.
const programInfoTries = 3

// ProgramInfo returns the kernels of p with their arguments and work-group
// limits on the physical device (the program-info command), waiting for
// every earlier command. It first offers one page of room and asks again
// with as much as the device reported when the blob did not fit.
func (d *Device) ProgramInfo(p Program) (abi.ProgramInfo, error) {
	if p.Handle == 0 {
		return abi.ProgramInfo{}, fmt.Errorf("program info of program 0: %w", ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return abi.ProgramInfo{}, err
	}
	if err := d.needMinor("program info", minorABI14); err != nil {
		return abi.ProgramInfo{}, err
	}
	if err := d.stale("program", p.Handle, p.gen); err != nil {
		return abi.ProgramInfo{}, fmt.Errorf("program info: %w", err)
	}
	room := uint64(abi.PageSize)
	for try := 0; try < programInfoTries; try++ {
		blob, size, err := d.programInfoOnce(p, room)
		if err != nil {
			return abi.ProgramInfo{}, fmt.Errorf("program info of program %d: %w", p.Handle, err)
		}
		if blob != nil {
			info, err := abi.UnmarshalProgramInfo(blob)
			if err != nil {
				return abi.ProgramInfo{}, fmt.Errorf("program info of program %d: device wrote a bad blob: %v: %w", p.Handle, err, ErrProtocol)
			}
			return info, nil
		}
		room = (size + abi.PageSize - 1) / abi.PageSize * abi.PageSize
	}
	return abi.ProgramInfo{}, fmt.Errorf("program info of program %d: the blob grew on every try: %w", p.Handle, ErrProtocol)
}

// programInfoOnce runs one program-info command with room bytes of staging
// pages. It returns the blob when it fitted, else nil and its size.
func (d *Device) programInfoOnce(p Program, room uint64) ([]byte, uint64, error) {
	return d.blobQuery(room, abi.ProgramInfoHeaderSize, func(count uint32, sgAddr uint64) abi.Payload {
		return &abi.ProgramInfoQuery{Handle: p.Handle, SGCount: count, Length: room, SGAddr: sgAddr}
	})
}

// blobQuery runs one command that writes a blob of at least minSize bytes
// through a scatter-gather list of room bytes of staging pages and reports
// its size as detail (program-info, device-info); query makes the payload
// from the list. It returns the blob when it fitted, else nil and its size.
func (d *Device) blobQuery(room, minSize uint64, query func(sgCount uint32, sgAddr uint64) abi.Payload) ([]byte, uint64, error) {
	np := int(room / abi.PageSize)
	nt := tablesFor(np)
	if np+nt > d.poolSize {
		return nil, 0, fmt.Errorf("blob of %d bytes does not fit the staging pool of %d pages: %w", room, d.poolSize, ErrInvalid)
	}
	ps, err := d.pages(np + nt)
	if err != nil {
		return nil, 0, err
	}
	data, tables := ps[:np], ps[np:]
	used, sgAddr, count, err := sgBuild(data, int(room), tables)
	if err != nil {
		d.free = append(d.free, ps...)
		return nil, 0, err
	}
	d.free = append(d.free, tables[len(used):]...)
	var blob []byte
	e := entry{sync: true, pages: ps[:np+len(used)], onDone: func(c abi.Completion) {
		if c.Status != abi.StatusOK || c.Detail > room || c.Detail < minSize {
			return
		}
		blob = make([]byte, 0, c.Detail)
		for _, pg := range data {
			blob = append(blob, pg.buf[:min(uint64(len(pg.buf)), c.Detail-uint64(len(blob)))]...)
		}
	}}
	idx, err := d.submit(abi.NewCommand(query(count, sgAddr), 0, d.next), e)
	if err != nil {
		return nil, 0, err
	}
	d.flush()
	rec, err := d.waitOK(idx)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case rec.Detail < minSize:
		return nil, 0, fmt.Errorf("device reported a blob of %d bytes: %w", rec.Detail, ErrProtocol)
	case rec.Detail <= room:
		return blob, rec.Detail, nil
	}
	return nil, rec.Detail, nil
}

// DeviceInfo returns the OpenCL device properties of the vGPU (the
// device-info command), with the image section where the device
// announces abi.FeatureImages, waiting for every earlier command. The blob
// always fits the one page of room it offers. The values may change
// across a live migration to another device model: ask again after one
// (docs/ABI.md "device-info").
func (d *Device) DeviceInfo() (abi.DeviceInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return abi.DeviceInfo{}, err
	}
	if err := d.needMinor("device info", minorABI14); err != nil {
		return abi.DeviceInfo{}, err
	}
	const room = abi.MaxDeviceInfoLen
	// A device with images answers with their section when asked, one
	// with SPIR-V with the il word too, one with images made from
	// buffers with the section's buffer part too.
	var version uint32
	switch {
	case d.info.Features&abi.FeatureImageBuffers != 0:
		version = abi.DeviceInfoVersionImageBuffers
	case d.info.Features&abi.FeatureIL != 0:
		version = abi.DeviceInfoVersionIL
	case d.info.Features&abi.FeatureImages != 0:
		version = abi.DeviceInfoVersionImages
	}
	blob, size, err := d.blobQuery(room, abi.DeviceInfoFixedSize, func(count uint32, sgAddr uint64) abi.Payload {
		return &abi.DeviceInfoQuery{SGCount: count, Version: version, Length: room, SGAddr: sgAddr}
	})
	switch {
	case err != nil:
		return abi.DeviceInfo{}, fmt.Errorf("device info: %w", err)
	case blob == nil:
		return abi.DeviceInfo{}, fmt.Errorf("device info: device reported a blob of %d bytes, over %d: %w", size, room, ErrProtocol)
	}
	info, err := abi.UnmarshalDeviceInfo(blob)
	if err != nil {
		return abi.DeviceInfo{}, fmt.Errorf("device info: device wrote a bad blob: %v: %w", err, ErrProtocol)
	}
	if uint64(len(blob)) != info.Size() {
		return abi.DeviceInfo{}, fmt.Errorf("device info: device reported %d bytes for a blob of %d: %w", len(blob), info.Size(), ErrProtocol)
	}
	if info.Version != version {
		return abi.DeviceInfo{}, fmt.Errorf("device info: device wrote a blob of version %d, asked for %d: %w", max(info.Version, 1), max(version, 1), ErrProtocol)
	}
	return info, nil
}

// submitOwned submits c with done, when not nil, owning its status
// (entry.owned): a failure then goes to done only, not to the next Finish.
func (d *Device) submitOwned(c abi.Command, pages []page, done func(abi.Completion)) error {
	_, err := d.submit(c, entry{pages: pages, onDone: done, owned: done != nil})
	return err
}

// CopyBuffer copies n bytes of src at srcOff into dst at dstOff on the
// device (buffer-copy, batched). src and dst may be the same buffer if the
// ranges do not overlap. When done is not nil it receives the completion
// and owns its status: a failure is not kept for the next Finish.
func (d *Device) CopyBuffer(src, dst Buffer, srcOff, dstOff, n uint64, done func(abi.Completion)) error {
	bc := &abi.BufferCopy{Src: src.Handle, Dst: dst.Handle, SrcOffset: srcOff, DstOffset: dstOff, Length: n}
	if err := checkRange64(src, srcOff, n); err != nil {
		return fmt.Errorf("copy buffer: source: %w", err)
	}
	if err := checkRange64(dst, dstOff, n); err != nil {
		return fmt.Errorf("copy buffer: destination: %w", err)
	}
	if bc.Overlaps() {
		return fmt.Errorf("copy buffer %d: %d+%d and %d+%d overlap: %w", src.Handle, srcOff, n, dstOff, n, ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if err := d.needMinor("copy buffer", minorABI14); err != nil {
		return err
	}
	if err := errors.Join(d.stale("buffer", src.Handle, src.gen), d.stale("buffer", dst.Handle, dst.gen)); err != nil {
		return fmt.Errorf("copy buffer: %w", err)
	}
	if err := d.submitOwned(abi.NewCommand(bc, 0, d.next), nil, done); err != nil {
		return fmt.Errorf("copy buffer %d to %d: %w", src.Handle, dst.Handle, err)
	}
	return nil
}

// FillBuffer fills n bytes of b at off with copies of pattern (buffer-fill,
// batched): len(pattern) is a power of two up to abi.MaxFillPattern and
// divides off and n. The pattern is staged before FillBuffer returns. done
// is as for CopyBuffer.
func (d *Device) FillBuffer(b Buffer, off, n uint64, pattern []byte, done func(abi.Completion)) error {
	pl := uint64(len(pattern))
	if pl == 0 || pl > abi.MaxFillPattern || pl&(pl-1) != 0 || off%pl != 0 || n%pl != 0 {
		return fmt.Errorf("fill buffer %d: pattern of %d bytes at %d+%d: %w", b.Handle, pl, off, n, ErrInvalid)
	}
	if err := checkRange64(b, off, n); err != nil {
		return fmt.Errorf("fill buffer: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if err := d.needMinor("fill buffer", minorABI14); err != nil {
		return err
	}
	if err := d.stale("buffer", b.Handle, b.gen); err != nil {
		return fmt.Errorf("fill buffer: %w", err)
	}
	ps, err := d.pages(1)
	if err != nil {
		return fmt.Errorf("fill buffer %d: %w", b.Handle, err)
	}
	copy(ps[0].buf, pattern) // page aligned: the pattern never crosses a page
	bf := &abi.BufferFill{Handle: b.Handle, PatternLen: uint32(pl), Offset: off, Length: n, PatternAddr: ps[0].gpa}
	if err := d.submitOwned(abi.NewCommand(bf, 0, d.next), ps, done); err != nil {
		return fmt.Errorf("fill buffer %d: %w", b.Handle, err)
	}
	return nil
}

// checkRange64 is checkRange for a 64-bit length.
func checkRange64(b Buffer, off, n uint64) error {
	if b.Handle == 0 || n == 0 || off+n < off || (b.Size != 0 && off+n > b.Size) {
		return fmt.Errorf("buffer %d of %d bytes: range %d+%d: %w", b.Handle, b.Size, off, n, ErrInvalid)
	}
	return nil
}
