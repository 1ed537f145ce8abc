package abi

import (
	"reflect"
	"testing"
)

// TestPayloadFieldsWalk checks each payload's one layout description from
// both ends: a walk stays inside the 48 payload bytes, decoding what
// encoding wrote gives the value back, and a decoding walk ends where the
// encoding walk did (the reserved tail that unmarshalPayload checks).
func TestPayloadFieldsWalk(t *testing.T) {
	for _, p := range []Payload{&Nop{}, &BufferCreate{Handle: 1, Flags: 2, Size: 3}, &BufferFree{Handle: 4},
		&Copy{Handle: 1, SGCount: 2, Offset: 3, Length: 4, SGAddr: 5},
		&ProgramBuild{Handle: 1, SrcCount: 2, SrcLen: 3, SrcSGAddr: 4, OptsAddr: 5, OptsLen: 6, LogLen: 7, LogAddr: 8},
		&ProgramFree{Handle: 9}, &Launch{Program: 1, DescLen: 2, DescAddr: 3}, &Fence{Addr: 1, Value: 2},
		&ProgramInfoQuery{Handle: 1, SGCount: 2, Length: 3, SGAddr: 4},
		&BufferCopy{Src: 1, Dst: 2, SrcOffset: 3, DstOffset: 4, Length: 5},
		&BufferFill{Handle: 1, PatternLen: 2, Offset: 3, Length: 4, PatternAddr: 5},
		&DeviceInfoQuery{SGCount: 1, Length: 2, SGAddr: 3},
		&ContextCreate{ID: 1, Slots: 2, Ring: 3, Compl: 4, Shadow: 5, MemLimit: 6}, &ContextDestroy{ID: 7}} {
		var b [48]byte
		enc := p.fields(encoder(b[:]))
		if int(enc.off) > len(b) {
			t.Errorf("%T: fields end at %d, past the payload", p, enc.off)
		}
		got := reflect.New(reflect.TypeOf(p).Elem()).Interface().(Payload)
		dec := got.fields(decoder(b[:]))
		if dec.off != enc.off {
			t.Errorf("%T: decoding ends at %d, encoding at %d", p, dec.off, enc.off)
		}
		if c, ok := p.(*Copy); ok {
			got.(*Copy).ToDevice = c.ToDevice // the opcode, not a field
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("%T: decoded %+v, encoded %+v", p, got, p)
		}
	}
}
