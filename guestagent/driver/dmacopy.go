package driver

import (
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

// Copies without staging (issue 42).
//
// Write and Read copy the caller's bytes through the staging pool: one
// memory copy in the guest per byte, before the device's own. A caller
// whose data already lies in DMA memory (pages from the device's Memory,
// pinned and never given to anyone who could free them) hands
// the device those pages instead: WriteFrom and ReadInto describe the
// caller's range with scatter-gather tables, the only pages they take
// from the pool, and the device copies straight between the range and the
// buffer.

// WriteFrom copies n bytes of src at offset at into b at off (batched),
// without staging: the device reads src's own pages. src's bytes must not
// change until the copy has completed (a later Finish, fence wait or
// Read returns), and its pages must stay pinned as long.
func (d *Device) WriteFrom(b Buffer, off uint64, src DMA, at, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDMA("write", b, off, src, at, n); err != nil {
		return err
	}
	for pos := 0; pos < n; {
		sent, _, err := d.dmaChunk(true, b.Handle, off+uint64(pos), src, at+pos, n-pos, false)
		if err != nil {
			return fmt.Errorf("write buffer %d at %d: %w", b.Handle, off+uint64(pos), err)
		}
		pos += sent
	}
	return nil
}

// ReadInto copies n bytes of b at off into dst at offset at, without
// staging: the device writes dst's own pages. It waits for every earlier
// command and the copy itself.
func (d *Device) ReadInto(b Buffer, off uint64, dst DMA, at, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDMA("read", b, off, dst, at, n); err != nil {
		return err
	}
	return d.readChunks(b.Handle, off, n, func(pos int) (int, uint64, error) {
		return d.dmaChunk(false, b.Handle, off+uint64(pos), dst, at+pos, n-pos, true)
	})
}

// checkDMA checks a WriteFrom or ReadInto (op) of n bytes of m at at. d.mu
// is held.
func (d *Device) checkDMA(op string, b Buffer, off uint64, m DMA, at, n int) error {
	if err := d.check(); err != nil {
		return err
	}
	if err := checkRange(b, off, n); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if at < 0 || at > len(m.Buf) || n > len(m.Buf)-at || len(m.Pages)*abi.PageSize < len(m.Buf) {
		return fmt.Errorf("%s: %d bytes at %d of %d bytes of DMA memory (%d pages): %w", op, n, at, len(m.Buf), len(m.Pages), ErrInvalid)
	}
	if err := d.stale("buffer", b.Handle, b.gen); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// dmaChunk submits one copy command for as much of the n bytes of m at
// at as its scatter-gather tables can describe in half the pool
// (inPlaceEntries), described in place, and returns how many bytes it
// covers and its index. Only its tables come from the pool, held until it
// completes. A contiguous range, or one of 64 KiB runs, of hundreds of
// MiB is one command: the device moves it in batches of its own, and the
// ring carries no command per half pool (issue 42).
func (d *Device) dmaChunk(toDev bool, h uint32, off uint64, m DMA, at, n int, sync bool) (int, uint64, error) {
	ents, n := dmaEntries(m, at, n, d.inPlaceEntries())
	tables, err := d.pages(tablesFor(len(ents)))
	if err != nil {
		return 0, 0, err
	}
	_, sgAddr, count, err := sgTables(ents, tables)
	if err != nil {
		d.free = append(d.free, tables...)
		return 0, 0, err
	}
	d.stats.InPlaceBytes += uint64(n)
	cmd := abi.NewCommand(&abi.Copy{ToDevice: toDev, Handle: h, SGCount: count, Offset: off, Length: uint64(n), SGAddr: sgAddr}, 0, d.next)
	idx, err := d.submit(cmd, entry{sync: sync, pages: tables})
	return n, idx, err
}

// inPlaceEntries is the most scatter-gather entries of one in-place copy:
// as many as half the pool holds as chained tables (so that two such
// copies can be in flight), at most abi.MaxSGEntries.
func (d *Device) inPlaceEntries() int {
	const per = abi.PageSize / abi.SGEntrySize
	np := max(d.poolSize/2, 1)
	return min(per+(np-1)*(per-1), abi.MaxSGEntries)
}

// dmaEntries describes the first bytes of the n bytes of m at at as
// scatter-gather entries, merging physically contiguous pages, up to
// maxEnts entries and maxInPlace bytes, and returns them and how many
// bytes they cover.
func dmaEntries(m DMA, at, n, maxEnts int) ([]abi.SGEntry, int) {
	var ents []abi.SGEntry
	covered := 0
	for covered < min(n, maxInPlace) {
		i, in := at/abi.PageSize, at%abi.PageSize
		take := min(n-covered, abi.PageSize-in, maxInPlace-covered)
		if len(ents) == maxEnts && !merges(ents, m.Pages[i]+uint64(in)) {
			break // the page would start an entry past the bound
		}
		ents = appendRun(ents, m.Pages[i]+uint64(in), take)
		at += take
		covered += take
	}
	return ents, covered
}

// maxInPlace bounds the bytes of one in-place copy command: 1 GiB, the
// longest a scatter-gather entry merges to (appendRun), so that a
// command's length and its device time stay bounded however contiguous
// the memory.
const maxInPlace = 1 << 30
