package aggregator

import (
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

// segment is one contiguous run of guest RAM.
type segment struct {
	gpa uint64
	len uint64
}

// walkSG reads the scatter-gather list of count entries at addr (chains
// followed) and returns its data segments, which must add up to exactly
// length bytes. Each table must lie within one page; a chain may only be a
// table's last entry; at most abi.MaxSGEntries entries are read, so a
// chain loop ends in an error.
func walkSG(mem GuestMemory, addr uint64, count uint32, length uint64) ([]segment, error) {
	var (
		segs  []segment
		total uint64
		seen  int
		table [abi.PageSize]byte
	)
	for count > 0 {
		if count > abi.PageSize/abi.SGEntrySize || addr%abi.SGEntrySize != 0 ||
			addr%abi.PageSize+uint64(count)*abi.SGEntrySize > abi.PageSize {
			return nil, abi.Errorf(abi.StatusInvalidArgument, "sg table of %d entries at %#x crosses a page", count, addr)
		}
		seen += int(count)
		if seen > abi.MaxSGEntries {
			return nil, abi.Errorf(abi.StatusInvalidArgument, "sg list over %d entries", abi.MaxSGEntries)
		}
		raw := table[:count*abi.SGEntrySize]
		if err := mem.ReadAt(raw, addr); err != nil {
			return nil, fmt.Errorf("sg table at %#x: %w", addr, err)
		}
		next := uint32(0)
		for i := uint32(0); i < count; i++ {
			e, err := abi.UnmarshalSGEntry(raw[i*abi.SGEntrySize:])
			if err != nil {
				return nil, fmt.Errorf("sg entry %d at %#x: %w", i, addr, err)
			}
			if e.Flags&abi.SGChain != 0 {
				if i != count-1 {
					return nil, abi.Errorf(abi.StatusInvalidArgument, "sg chain entry %d is not last of %d", i, count)
				}
				addr, next = e.Addr, e.Len
				break
			}
			if uint64(e.Len) > length-total {
				return nil, abi.Errorf(abi.StatusInvalidArgument, "sg list longer than %d bytes", length)
			}
			total += uint64(e.Len)
			if n := len(segs); n > 0 && segs[n-1].gpa+segs[n-1].len == e.Addr {
				segs[n-1].len += uint64(e.Len) // merge physically adjacent pages
			} else {
				segs = append(segs, segment{gpa: e.Addr, len: uint64(e.Len)})
			}
		}
		count = next
	}
	if total != length {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "sg list of %d bytes for a %d byte transfer", total, length)
	}
	return segs, nil
}

// gather copies the segments' bytes into buf (len(buf) = their total).
func gather(mem GuestMemory, segs []segment, buf []byte) error {
	for _, s := range segs {
		if err := mem.ReadAt(buf[:s.len], s.gpa); err != nil {
			return err
		}
		buf = buf[s.len:]
	}
	return nil
}

// scatter copies buf into the segments.
func scatter(mem GuestMemory, segs []segment, buf []byte) error {
	for _, s := range segs {
		if err := mem.WriteAt(buf[:s.len], s.gpa); err != nil {
			return err
		}
		buf = buf[s.len:]
	}
	return nil
}
