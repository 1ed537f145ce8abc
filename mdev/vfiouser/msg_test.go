package vfiouser

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestPayloadRoundTrip encodes and decodes every payload type.
func TestPayloadRoundTrip(t *testing.T) {
	h := Header{ID: 0xbeef, Cmd: CmdRegionWrite, Size: 40, Flags: TypeReply | FlagError, Error: 22}
	var hb [HeaderSize]byte
	h.Put(hb[:])
	if got := ParseHeader(hb[:]); got != h {
		t.Errorf("header: %+v, want %+v", got, h)
	}
	v := Version{Major: 0, Minor: 3, Caps: []byte("{}\x00")}
	if got, err := UnmarshalVersion(v.Marshal()); err != nil || !reflect.DeepEqual(got, v) {
		t.Errorf("version: %+v %v", got, err)
	}
	dm := DMAMap{Argsz: 32, Flags: 3, Offset: 1 << 20, Addr: 1 << 32, Size: 1 << 30}
	if got, err := UnmarshalDMAMap(dm.Marshal()); err != nil || got != dm {
		t.Errorf("dma map: %+v %v", got, err)
	}
	du := DMAUnmap{Argsz: 24, Addr: 1 << 32, Size: 4096}
	if got, err := UnmarshalDMAUnmap(du.Marshal()); err != nil || got != du {
		t.Errorf("dma unmap: %+v %v", got, err)
	}
	in := Info{Argsz: 16, Flags: 3, Index: 9, Count: 5}
	if got, err := UnmarshalInfo(CmdDeviceGetInfo, in.Marshal()); err != nil || got != in {
		t.Errorf("info: %+v %v", got, err)
	}
	ri := RegionInfo{Argsz: 32, Flags: 3, Index: 7, Size: 256, Offset: 1 << 40}
	if got, err := UnmarshalRegionInfo(ri.Marshal()); err != nil || got != ri {
		t.Errorf("region info: %+v %v", got, err)
	}
	io := RegionIOFDs{Argsz: 56, Index: 0, Count: 1, Subs: []IOFD{{Offset: 0x74, Size: 4, FDIndex: 0, Type: IOFDTypeIoeventfd, Datamatch: 9}}}
	if got, err := UnmarshalRegionIOFDs(io.Marshal()); err != nil || !reflect.DeepEqual(got, io) {
		t.Errorf("region io fds: %+v %v", got, err)
	}
	set := IRQSet{Argsz: 21, Flags: IRQSetDataBool | IRQSetActionTrigger, Index: IRQIntx, Count: 1, Data: []byte{1}}
	if got, err := UnmarshalIRQSet(set.Marshal()); err != nil || !reflect.DeepEqual(got, set) {
		t.Errorf("irq set: %+v %v", got, err)
	}
	ra := RegionAccess{Offset: 0x58, Region: RegionBAR0, Count: 4, Data: []byte{1, 2, 3, 4}}
	if got, err := UnmarshalRegionAccess(CmdRegionWrite, ra.Marshal()); err != nil || !reflect.DeepEqual(got, ra) {
		t.Errorf("region access: %+v %v", got, err)
	}
	for _, short := range [][]byte{nil, make([]byte, 3)} {
		if _, err := UnmarshalVersion(short); err == nil {
			t.Errorf("version of %d bytes decoded", len(short))
		}
	}
	if _, err := UnmarshalRegionIOFDs(append(io.Marshal(), 0)); err == nil {
		t.Error("region io fds with a trailing byte decoded")
	}
	if !bytes.HasSuffix(serverCaps, []byte{0}) {
		t.Error("server capabilities are not NUL-terminated")
	}
}

// TestCheckArgsz: the argsz rules, command by command (see minArgsz).
func TestCheckArgsz(t *testing.T) {
	argsz := func(a uint32, n int) []byte {
		b := make([]byte, n)
		le.PutUint32(b, a)
		return b
	}
	for _, c := range []struct {
		cmd     Cmd
		payload []byte
		ok      bool
	}{
		{CmdDMAMap, argsz(32, 32), true},
		{CmdDMAMap, argsz(8, 32), false},
		{CmdDMAMap, argsz(33, 32), false},
		{CmdDMAMap, argsz(32, 40), false},
		{CmdDeviceSetIRQs, argsz(20, 20), true},
		{CmdDeviceSetIRQs, argsz(21, 21), true},
		{CmdDeviceSetIRQs, argsz(20, 21), false},
		{CmdDeviceSetIRQs, argsz(21, 20), false},
		{CmdDeviceSetIRQs, argsz(19, 19), false},
		{CmdDMAUnmap, argsz(24, 24), true},
		{CmdDMAUnmap, argsz(1<<20, 24), true},
		{CmdDMAUnmap, argsz(23, 24), false},
		{CmdDeviceGetInfo, argsz(16, 16), true},
		{CmdDeviceGetInfo, argsz(15, 16), false},
		{CmdDeviceGetRegion, argsz(32, 32), true},
		{CmdDeviceGetRegion, argsz(0xffffffff, 32), true},
		{CmdDeviceGetRegion, argsz(31, 32), false},
		{CmdDeviceGetRegionIO, argsz(16, 16), true},
		{CmdDeviceGetRegionIO, argsz(15, 16), false},
		{CmdDeviceGetIRQInfo, argsz(16, 16), true},
		{CmdDeviceGetIRQInfo, argsz(0, 16), false},
		{CmdDeviceGetInfo, nil, false},
		{CmdDeviceGetInfo, []byte{16, 0, 0}, false},
		// No argsz: nothing to check.
		{CmdVersion, nil, true},
		{CmdRegionRead, argsz(0, 16), true},
		{CmdDeviceReset, nil, true},
	} {
		err := CheckArgsz(c.cmd, c.payload)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrProtocol)) {
			t.Errorf("%v argsz %x, %d bytes: %v; want ok %v", c.cmd, c.payload[:min(4, len(c.payload))], len(c.payload), err, c.ok)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the header parser and every
// payload decoder: none panics, a header that passes Check has a size
// the server can buffer, and whatever decodes encodes back to the same
// value.
func FuzzDecode(f *testing.F) {
	f.Add(Header{ID: 1, Cmd: CmdVersion, Size: 20}.bytes(), Version{Caps: []byte("{}\x00")}.Marshal())
	f.Add(Header{ID: 1, Cmd: CmdVersion, Size: 20}.bytes(), Version{Caps: []byte(`{"capabilities":{"max_msg_fds":1,"twin_socket":{"supported":true},"migration":{"pgsize":4096}}}` + "\x00")}.Marshal())
	f.Add(Header{ID: 2, Cmd: CmdDMAMap, Size: 48}.bytes(), DMAMap{Argsz: 32, Flags: 3, Size: 4096}.Marshal())
	f.Add(Header{ID: 3, Cmd: CmdDMAUnmap, Size: 40}.bytes(), DMAUnmap{Argsz: 24, Size: 4096}.Marshal())
	f.Add(Header{ID: 4, Cmd: CmdDeviceGetRegionIO, Size: 32}.bytes(), RegionIOFDs{Argsz: 56, Count: 1, Subs: []IOFD{{Offset: 0x74, Size: 4}}}.Marshal())
	f.Add(Header{ID: 5, Cmd: CmdDeviceSetIRQs, Size: 37, Flags: FlagNoReply}.bytes(), IRQSet{Argsz: 21, Flags: 0x22, Count: 1, Data: []byte{1}}.Marshal())
	f.Add(Header{ID: 6, Cmd: CmdRegionWrite, Size: 36}.bytes(), RegionAccess{Offset: 0x58, Count: 4, Data: []byte{1, 2, 3, 4}}.Marshal())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, []byte{})
	f.Fuzz(func(t *testing.T, hdr, payload []byte) {
		if len(hdr) >= HeaderSize {
			h := ParseHeader(hdr)
			var b [HeaderSize]byte
			h.Put(b[:])
			if ParseHeader(b[:]) != h {
				t.Fatalf("header %+v does not survive a round trip", h)
			}
			if h.Check() == nil && (h.Size < HeaderSize || h.Size-HeaderSize > MaxPayload) {
				t.Fatalf("Check accepted size %d", h.Size)
			}
		}
		if v, err := UnmarshalVersion(payload); err == nil {
			if w, err := UnmarshalVersion(v.Marshal()); err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("version %+v -> %+v, %v", v, w, err)
			}
			if err := CheckCaps(v.Caps); err == nil && len(v.Caps) > 0 && bytes.IndexByte(v.Caps, 0) != len(v.Caps)-1 {
				t.Fatalf("capabilities %q accepted without their one NUL at the end", v.Caps)
			} else if err != nil && !errors.Is(err, ErrProtocol) {
				t.Fatalf("capabilities %q: %v, not a protocol violation", v.Caps, err)
			}
		}
		for c := range Cmd(20) {
			if err := CheckArgsz(c, payload); err == nil && len(payload) >= 4 {
				if a, least := le.Uint32(payload), minArgsz[c]; a < least ||
					((c == CmdDMAMap || c == CmdDeviceSetIRQs) && int64(a) != int64(len(payload))) {
					t.Fatalf("%v: argsz %d accepted with a %d-byte payload", c, a, len(payload))
				}
			}
		}
		if m, err := UnmarshalDMAMap(payload); err == nil {
			if !bytes.Equal(m.Marshal(), payload) {
				t.Fatalf("dma map %+v re-encodes differently", m)
			}
		}
		if m, err := UnmarshalDMAUnmap(payload); err == nil {
			if !bytes.Equal(m.Marshal(), payload) {
				t.Fatalf("dma unmap %+v re-encodes differently", m)
			}
		}
		if in, err := UnmarshalInfo(CmdDeviceGetInfo, payload); err == nil {
			if !bytes.Equal(in.Marshal(), payload) {
				t.Fatalf("info %+v re-encodes differently", in)
			}
		}
		if r, err := UnmarshalRegionInfo(payload); err == nil {
			if !bytes.Equal(r.Marshal(), payload) {
				t.Fatalf("region info %+v re-encodes differently", r)
			}
		}
		if r, err := UnmarshalRegionIOFDs(payload); err == nil {
			// The sub-regions' padding is not kept: compare values.
			if s, err := UnmarshalRegionIOFDs(r.Marshal()); err != nil || !reflect.DeepEqual(r, s) {
				t.Fatalf("region io fds %+v -> %+v, %v", r, s, err)
			}
			if len(r.Subs) != 0 && uint32(len(r.Subs)) != r.Count {
				t.Fatalf("%d sub-regions for count %d", len(r.Subs), r.Count)
			}
		}
		if s, err := UnmarshalIRQSet(payload); err == nil {
			if !bytes.Equal(s.Marshal(), payload) {
				t.Fatalf("irq set %+v re-encodes differently", s)
			}
		}
		if r, err := UnmarshalRegionAccess(CmdRegionWrite, payload); err == nil {
			if !bytes.Equal(r.Marshal(), payload) {
				t.Fatalf("region access %+v re-encodes differently", r)
			}
		}
	})
}

func (h Header) bytes() []byte {
	b := make([]byte, HeaderSize)
	h.Put(b)
	return b
}
