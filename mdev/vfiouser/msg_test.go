package vfiouser

import (
	"bytes"
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
