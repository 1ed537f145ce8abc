package driver

import (
	"math/rand/v2"
	"testing"

	"github.com/vgpud/vgpud/abi"
)

func TestTablesFor(t *testing.T) {
	tests := []struct{ n, want int }{{1, 1}, {256, 1}, {257, 2}, {511, 2}, {512, 3}, {766, 3}, {767, 4}}
	for _, tt := range tests {
		if got := tablesFor(tt.n); got != tt.want {
			t.Errorf("tablesFor(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// testPages returns n pages at the given page numbers.
func testPages(pfns []uint64) []page {
	ps := make([]page, len(pfns))
	for i, p := range pfns {
		ps[i] = page{buf: make([]byte, abi.PageSize), gpa: p * abi.PageSize}
	}
	return ps
}

// walk decodes an SG list the way a device would, from the tables only.
func walk(t *testing.T, tables []page, addr uint64, count uint32) []abi.SGEntry {
	t.Helper()
	byGPA := map[uint64][]byte{}
	for _, p := range tables {
		byGPA[p.gpa] = p.buf
	}
	var out []abi.SGEntry
	for count > 0 {
		if count > abi.PageSize/abi.SGEntrySize {
			t.Fatalf("table of %d entries", count)
		}
		tb, ok := byGPA[addr]
		if !ok {
			t.Fatalf("table address %#x is not a table page", addr)
		}
		next := uint32(0)
		for i := uint32(0); i < count; i++ {
			e, err := abi.UnmarshalSGEntry(tb[i*abi.SGEntrySize:])
			if err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			if e.Flags&abi.SGChain != 0 {
				if i != count-1 {
					t.Fatalf("chain entry %d of %d not last", i, count)
				}
				addr, next = e.Addr, e.Len
				continue
			}
			out = append(out, e)
		}
		count = next
	}
	return out
}

func TestSGBuild(t *testing.T) {
	tests := []struct {
		name    string
		pages   int
		length  int
		shuffle bool
		entries int
	}{
		{"one byte", 1, 1, true, 1},
		{"contiguous merge", 10, 10*abi.PageSize - 7, false, 1},
		{"shuffled 256", 256, 256 * abi.PageSize, true, 256},
		{"shuffled chain", 600, 600*abi.PageSize - 1, true, 600},
		{"shuffled two chains", 1000, 1000 * abi.PageSize, true, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pfns := make([]uint64, tt.pages+tablesFor(tt.pages))
			for i := range pfns {
				pfns[i] = uint64(1000 + i)
				if tt.shuffle {
					pfns[i] = uint64(1000 + 2*i) // never adjacent
				}
			}
			if tt.shuffle {
				r := rand.New(rand.NewPCG(1, 2))
				r.Shuffle(len(pfns), func(i, j int) { pfns[i], pfns[j] = pfns[j], pfns[i] })
			}
			ps := testPages(pfns)
			data, tables := ps[:tt.pages], ps[tt.pages:]
			used, addr, count, err := sgBuild(data, tt.length, tables)
			if err != nil {
				t.Fatalf("sgBuild() = %v", err)
			}
			ents := walk(t, used, addr, count)
			if len(ents) != tt.entries {
				t.Errorf("sgBuild() gave %d data entries, want %d", len(ents), tt.entries)
			}
			// The entries must describe exactly the data pages, in order.
			var total int
			pi := 0
			for _, e := range ents {
				for o := uint64(0); o < uint64(e.Len); o += abi.PageSize {
					if e.Addr+o != data[pi].gpa {
						t.Fatalf("entry covers %#x, want page %d at %#x", e.Addr+o, pi, data[pi].gpa)
					}
					pi++
				}
				total += int(e.Len)
			}
			if total != tt.length {
				t.Errorf("entries add up to %d bytes, want %d", total, tt.length)
			}
		})
	}
}

func TestSGBuildErrors(t *testing.T) {
	ps := testPages([]uint64{1, 3, 5, 7})
	if _, _, _, err := sgBuild(ps[:1], 2*abi.PageSize, ps[1:]); err == nil {
		t.Errorf("sgBuild(length beyond pages) = nil error")
	}
	if _, _, _, err := sgBuild(ps, 4*abi.PageSize, nil); err == nil {
		t.Errorf("sgBuild(no tables) = nil error")
	}
}

// TestDMAEntriesBound: an in-place copy's entries stop at the bound only
// where the next page would start a new entry, and cover its bytes
// exactly; contiguous memory is one entry however long (up to
// maxInPlace).
func TestDMAEntriesBound(t *testing.T) {
	const pg = abi.PageSize
	scattered := DMA{Buf: make([]byte, 6*pg), Pages: []uint64{10 * pg, 20 * pg, 21 * pg, 40 * pg, 50 * pg, 60 * pg}}
	tests := []struct {
		name        string
		at, n, max  int
		wantEnts    int
		wantCovered int
	}{
		{"all fit", 0, 6 * pg, 6, 5, 6 * pg},
		{"bound of 2 takes the merged pair", 0, 6 * pg, 2, 2, 3 * pg},
		{"bound of 1 from a page's middle", 100, 6*pg - 100, 1, 1, pg - 100},
		{"bound of 3 ends on a page's middle", 5 * pg / 2, 2 * pg, 3, 3, 2 * pg},
	}
	for _, tt := range tests {
		ents, covered := dmaEntries(scattered, tt.at, tt.n, tt.max)
		if len(ents) != tt.wantEnts || covered != tt.wantCovered {
			t.Errorf("%s: %d entries covering %d bytes, want %d covering %d", tt.name, len(ents), covered, tt.wantEnts, tt.wantCovered)
		}
		var sum int
		for _, e := range ents {
			sum += int(e.Len)
		}
		if sum != covered {
			t.Errorf("%s: entries add up to %d bytes, cover %d", tt.name, sum, covered)
		}
	}
	const np = 1 << 10
	contiguous := DMA{Buf: make([]byte, np*pg), Pages: make([]uint64, np)}
	for i := range contiguous.Pages {
		contiguous.Pages[i] = uint64(0x1000+i) * pg
	}
	if ents, covered := dmaEntries(contiguous, 0, np*pg, 1); len(ents) != 1 || covered != np*pg {
		t.Errorf("contiguous 4 MiB: %d entries covering %d bytes, want 1 covering all", len(ents), covered)
	}
}
