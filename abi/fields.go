package abi

// fieldCodec walks the fields of one fixed-layout wire structure in wire
// order, at consecutive offsets of b, and either writes them (encoding)
// or reads them (decoding). A type describes its layout once, in a
// method that passes each field through the codec:
//
//	func (b *BufferFree) fields(f fieldCodec) fieldCodec { return f.u32(&b.Handle) }
//
// and the same method both marshals and unmarshals it, so the two
// directions cannot disagree on an offset. Each step returns the codec
// moved past its field. The codec is a small value (at most four words,
// so the compiler keeps it in registers): a walk allocates nothing.
//
// The walk never checks lengths: b is a fixed-size slot or payload that the
// caller has sized, and a layout that runs past it is a programming error
// (an index panic), never a reaction to input.
type fieldCodec struct {
	b   []byte
	off uint16 // where the next field starts
	dec bool   // decoding: fields are read from b; else written to it
	// rsv is, after a decoding walk, the value of the last reserved word
	// the walk passed (reserved32), for a type whose checks report it.
	rsv uint32
}

// encoder returns a codec that writes fields into b from offset 0.
func encoder(b []byte) fieldCodec { return fieldCodec{b: b} }

// decoder returns a codec that reads fields from b from offset 0.
func decoder(b []byte) fieldCodec { return fieldCodec{b: b, dec: true} }

// The three integer widths are spelled out rather than shared through a
// generic helper taking the encoding functions: the walk is on the
// device's command path, and these inline into plain loads and stores.

// u16 passes a 2-byte field.
func (f fieldCodec) u16(v *uint16) fieldCodec {
	if f.dec {
		*v = le.Uint16(f.b[f.off:])
	} else {
		le.PutUint16(f.b[f.off:], *v)
	}
	f.off += 2
	return f
}

// u32 passes a 4-byte field.
func (f fieldCodec) u32(v *uint32) fieldCodec {
	if f.dec {
		*v = le.Uint32(f.b[f.off:])
	} else {
		le.PutUint32(f.b[f.off:], *v)
	}
	f.off += 4
	return f
}

// u64 passes an 8-byte field.
func (f fieldCodec) u64(v *uint64) fieldCodec {
	if f.dec {
		*v = le.Uint64(f.b[f.off:])
	} else {
		le.PutUint64(f.b[f.off:], *v)
	}
	f.off += 8
	return f
}

// raw passes a field of len(v) bytes, copied as is.
func (f fieldCodec) raw(v []byte) fieldCodec {
	if f.dec {
		copy(v, f.b[f.off:])
	} else {
		copy(f.b[f.off:], v)
	}
	f.off += uint16(len(v))
	return f
}

// reserved32 passes a reserved 4-byte word: written as 0; its value when
// decoding is kept in rsv.
func (f fieldCodec) reserved32() fieldCodec {
	var v uint32
	f = f.u32(&v)
	f.rsv = v
	return f
}
