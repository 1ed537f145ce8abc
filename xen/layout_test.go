package xen_test

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/vgpud/vgpud/xen"
)

// The bytes of struct ioreq and struct buf_ioreq as GCC lays them out
// from Xen 4.17's xen/hvm/ioreq.h (checked again against the installed
// header by xen/xenctl's TestLayoutAgainstHeaders where it is present).
func TestIOReqBytes(t *testing.T) {
	r := xen.IOReq{
		Addr: 0x1122334455667788, Data: 0x99aabbccddeeff00, Count: 0x01020304, Size: 4,
		VPEport: 0x0a0b0c0d, State: xen.StateReady, DataIsPtr: true, Dir: xen.IOReqRead, DF: true, Type: xen.TypePCIConfig,
	}
	b := xen.MarshalIOReq(r)
	le := binary.LittleEndian
	if le.Uint64(b[0:]) != r.Addr || le.Uint64(b[8:]) != r.Data || le.Uint32(b[16:]) != r.Count ||
		le.Uint32(b[20:]) != r.Size || le.Uint32(b[24:]) != uint32(r.VPEport) {
		t.Errorf("fields at the wrong offsets: % x", b)
	}
	// state:4 in bits 0-3, data_is_ptr bit 4, dir bit 5, df bit 6 of byte
	// 30; type is byte 31; _pad0 (bytes 28-29) stays 0.
	if want := [4]byte{0, 0, 0x01 | 0x10 | 0x20 | 0x40, xen.TypePCIConfig}; [4]byte(b[28:32]) != want {
		t.Errorf("state word % x, want % x", b[28:32], want)
	}
	for _, c := range []struct {
		r    xen.IOReq
		want byte
	}{
		{xen.IOReq{State: 0xf}, 0x0f},
		{xen.IOReq{DataIsPtr: true}, 0x10},
		{xen.IOReq{Dir: xen.IOReqRead}, 0x20},
		{xen.IOReq{DF: true}, 0x40},
	} {
		if got := xen.MarshalIOReq(c.r)[30]; got != c.want {
			t.Errorf("%v: byte 30 = %#x, want %#x", c.r, got, c.want)
		}
	}
	if got := xen.UnmarshalIOReq(b); got != r {
		t.Errorf("round trip: %v, want %v", got, r)
	}
}

func TestBufIOReqBytes(t *testing.T) {
	for _, c := range []struct {
		r    xen.BufIOReq
		want [8]byte
	}{
		{xen.BufIOReq{Addr: 0xfffff}, [8]byte{0, 0xf0, 0xff, 0xff}},
		{xen.BufIOReq{Size: 3}, [8]byte{0, 0x0c}},
		{xen.BufIOReq{Dir: xen.IOReqRead}, [8]byte{0, 0x02}},
		{xen.BufIOReq{Type: xen.TypeCopy, Data: 0x11223344}, [8]byte{1, 0, 0, 0, 0x44, 0x33, 0x22, 0x11}},
	} {
		if got := xen.MarshalBufIOReq(c.r); got != c.want {
			t.Errorf("%+v: % x, want % x", c.r, got, c.want)
		}
		if got := xen.UnmarshalBufIOReq(c.want); got != c.r {
			t.Errorf("% x decodes as %+v, want %+v", c.want, got, c.r)
		}
	}
}

func genIOReq(t *rapid.T) xen.IOReq {
	return xen.IOReq{
		Addr: rapid.Uint64().Draw(t, "addr"), Data: rapid.Uint64().Draw(t, "data"),
		Count: rapid.Uint32().Draw(t, "count"), Size: rapid.Uint32().Draw(t, "size"),
		VPEport: xen.Port(rapid.Uint32().Draw(t, "port")), State: rapid.Uint8Range(0, 15).Draw(t, "state"),
		DataIsPtr: rapid.Bool().Draw(t, "ptr"), Dir: rapid.Uint8Range(0, 1).Draw(t, "dir"),
		DF: rapid.Bool().Draw(t, "df"), Type: rapid.Uint8().Draw(t, "type"),
	}
}

func TestIOReqRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genIOReq(t)
		if got := xen.UnmarshalIOReq(xen.MarshalIOReq(r)); got != r {
			t.Fatalf("round trip: %v, want %v", got, r)
		}
		b := xen.BufIOReq{Type: rapid.Uint8().Draw(t, "btype"), Dir: rapid.Uint8Range(0, 1).Draw(t, "bdir"),
			Size: rapid.Uint8Range(0, 3).Draw(t, "bsize"), Addr: rapid.Uint32Range(0, 1<<20-1).Draw(t, "baddr"), Data: rapid.Uint32().Draw(t, "bdata")}
		if got := xen.UnmarshalBufIOReq(xen.MarshalBufIOReq(b)); got != b {
			t.Fatalf("buf round trip: %+v, want %+v", got, b)
		}
	})
}

// page maps one page, as a foreign mapping would be.
func page(t *testing.T) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, xen.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// The page views read and write exactly the bytes Marshal describes, at
// slot i*32.
func TestIOReqPageView(t *testing.T) {
	b := page(t)
	p, err := xen.NewIOReqPage(b)
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		i := rapid.IntRange(0, xen.MaxVCPUs-1).Draw(rt, "vcpu")
		r := genIOReq(rt)
		s := p.Slot(i)
		s.Store(r)
		if got, want := [32]byte(b[i*32:i*32+32]), xen.MarshalIOReq(r); got != want {
			rt.Fatalf("slot %d bytes % x, want % x", i, got, want)
		}
		if got := s.Load(); got != r {
			rt.Fatalf("load %v, want %v", got, r)
		}
		if !s.SwapState(r.State, xen.StateRespReady) || s.State() != xen.StateRespReady {
			rt.Fatalf("swap state from %d", r.State)
		}
		if got := s.Load(); got.Type != r.Type || got.Dir != r.Dir || got.DF != r.DF || got.DataIsPtr != r.DataIsPtr {
			rt.Fatalf("state swap changed the flags: %v, was %v", got, r)
		}
		s.SetData(7)
		if s.Data() != 7 || binary.LittleEndian.Uint64(b[i*32+8:]) != 7 {
			rt.Fatal("data not at offset 8")
		}
	})
	if _, err := xen.NewIOReqPage(b[:100]); err == nil {
		t.Error("a short page was accepted")
	}
	if _, err := xen.NewIOReqPage(b[1 : xen.PageSize+0]); err == nil {
		t.Error("a short, misaligned page was accepted")
	}
}

func TestBufPageView(t *testing.T) {
	b := page(t)
	p, err := xen.NewBufPage(b)
	if err != nil {
		t.Fatal(err)
	}
	p.SetPointers(5, 9)
	if p.ReadPointer() != 5 || p.WritePointer() != 9 || binary.LittleEndian.Uint32(b[0:]) != 5 || binary.LittleEndian.Uint32(b[4:]) != 9 {
		t.Errorf("pointers: % x", b[:8])
	}
	p.AdvanceRead(2)
	if p.ReadPointer() != 7 {
		t.Errorf("read pointer %d after advancing by 2 from 5", p.ReadPointer())
	}
	e := xen.BufIOReq{Type: xen.TypeCopy, Size: 2, Addr: 0x12345, Data: 0xdeadbeef}
	p.SetEntry(xen.BufSlots+3, e) // wraps to slot 3
	if got := [8]byte(b[8+3*8 : 8+4*8]); got != xen.MarshalBufIOReq(e) {
		t.Errorf("slot 3 bytes % x", got)
	}
	if got := p.Entry(3); got != e {
		t.Errorf("entry 3 = %+v", got)
	}
	if 8+xen.BufSlots*8 != xen.PageSize {
		t.Errorf("ring of %d slots does not fill the page", xen.BufSlots)
	}
}

func TestParseSBDF(t *testing.T) {
	for in, want := range map[string]xen.SBDF{
		"0000:00:10.0": {Dev: 0x10},
		"00:1f.7":      {Dev: 0x1f, Fn: 7},
		"0001:02:03.4": {Seg: 1, Bus: 2, Dev: 3, Fn: 4},
	} {
		got, err := xen.ParseSBDF(in)
		if err != nil || got != want {
			t.Errorf("ParseSBDF(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "00:20.0", "00:01.8", "zz:00.0", "10000:00:00.0"} {
		if _, err := xen.ParseSBDF(bad); err == nil {
			t.Errorf("ParseSBDF(%q) accepted", bad)
		}
	}
	if got := (xen.SBDF{Seg: 1, Bus: 2, Dev: 3, Fn: 4}).Uint32(); got != 1<<16|2<<8|3<<3|4 {
		t.Errorf("Uint32 = %#x", got)
	}
}
