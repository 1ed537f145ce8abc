package icdproto

import "github.com/vgpud/vgpud/internal/codec"

// fieldCodec passes the fields of a message through internal/codec in
// wire order: appending them to w (encoding) or reading them from r
// (decoding). Every wire structure describes its fields once, in a method
// that passes each of them through the codec, and that one method both
// encodes and decodes it:
//
//   - a fixed structure (the fixed interface) lists its fields;
//   - a body with a variable tail (the variable interface) passes its
//     head, checks it when decoding, and passes its tail.
type fieldCodec struct {
	dec bool // decoding: fields are read from r; else appended to w
	w   codec.Writer
	r   codec.Reader
	// size is the length of the body being decoded.
	size int
	// n counts the bytes of the fields passed, whether or not a read
	// found them: decoding, after a short read, how long the body should
	// have been.
	n int
}

// fixed is a wire structure of fixed size (a pointer to one).
type fixed interface {
	// fields passes every field, reserved ones included, in wire order.
	fields(c *fieldCodec) *fieldCodec
}

// variable is a body with a fixed head and a variable tail (a pointer to
// one).
type variable interface {
	// walk passes the body: encoding, the head (its counts set from the
	// tail) and the tail; decoding, the head, the checks of its counts
	// and lengths against the body, and the tail.
	walk(c *fieldCodec) error
}

// encoder returns a codec that appends to b.
func encoder(b []byte) *fieldCodec { return &fieldCodec{w: codec.Writer{B: b}} }

// decoder returns a codec that reads body p.
func decoder(p []byte) *fieldCodec {
	return &fieldCodec{dec: true, r: codec.NewReader(p, nil), size: len(p)}
}

// u16 passes a 2-byte field.
func (c *fieldCodec) u16(v *uint16) *fieldCodec {
	return num(c, v, 2, (*codec.Reader).U16, (*codec.Writer).U16)
}

// u32 passes a 4-byte field.
func (c *fieldCodec) u32(v *uint32) *fieldCodec {
	return num(c, v, 4, (*codec.Reader).U32, (*codec.Writer).U32)
}

// u64 passes an 8-byte field.
func (c *fieldCodec) u64(v *uint64) *fieldCodec {
	return num(c, v, 8, (*codec.Reader).U64, (*codec.Writer).U64)
}

// num passes an integer field of n bytes with get, the Reader's method
// that reads it, and put, the Writer's that appends it.
func num[T uint16 | uint32 | uint64](c *fieldCodec, v *T, n int, get func(*codec.Reader) T, put func(*codec.Writer, T)) *fieldCodec {
	c.n += n
	if c.dec {
		*v = get(&c.r)
	} else {
		put(&c.w, *v)
	}
	return c
}

// u64s passes an array of 8-byte fields.
func (c *fieldCodec) u64s(v []uint64) *fieldCodec {
	for i := range v {
		c.u64(&v[i])
	}
	return c
}

// bytes passes a byte array (a name, a pattern) as is.
func (c *fieldCodec) bytes(v []byte) *fieldCodec {
	c.n += len(v)
	if c.dec {
		copy(v, c.r.Take(len(v)))
	} else {
		c.w.Raw(v)
	}
	return c
}

// tail passes the bytes that end a body: decoding, a copy of every byte
// left (nil when none is).
func (c *fieldCodec) tail(v *[]byte) {
	if c.dec {
		*v = append([]byte(nil), c.r.Rest()...)
	} else {
		c.w.Raw(*v)
	}
}

// fits ends the walk of the fields that start a body, its head or the
// whole of a fixed body: decoding, the body must hold them and, unless a
// tail follows them, nothing more.
func (c *fieldCodec) fits(tail bool) error {
	if c.dec && (c.r.Err() != nil || !tail && c.r.Len() != 0) {
		return badLen(c.size, c.n)
	}
	return nil
}

// want checks, decoding, that the body is the fields passed so far (its
// head) and exactly n bytes more: the length of the tail its head's counts
// fix.
func (c *fieldCodec) want(n int) error {
	if c.dec && c.size != c.n+n {
		return badLen(c.size, c.n+n)
	}
	return nil
}

// badLen is the error of a body whose length is not the one its op (and
// its head) fix.
func badLen(n, want int) error {
	return Errorf(ErrMalformed, "body of %d bytes, want %d", n, want)
}

// fields passes the header.
func (h *Header) fields(c *fieldCodec) *fieldCodec {
	return c.u16((*uint16)(&h.Op)).u16(&h.Flags).u32(&h.Len).u64(&h.ID)
}

// fields passes the body.
func (b *Hello) fields(c *fieldCodec) *fieldCodec { return c.u32(&b.Version).u32(&b.Reserved) }

// fields passes the head.
func (b *HelloReplyHead) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Version).u32(&b.DeviceCount)
}

// fields passes the record.
func (d *DeviceRecord) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&d.Index).u32(&d.AbiVersion).u32(&d.Features).u32(&d.ComputeUnits).
		u64(&d.MemSize).u64(&d.MaxAlloc).u32(&d.MaxWorkGroup).u32(&d.Reserved).
		bytes(d.Profile[:]).bytes(d.Name[:])
}

// fields passes the body.
func (b *DeviceInfo) fields(c *fieldCodec) *fieldCodec { return c.u32(&b.Device).u32(&b.Reserved) }

// fields passes the head.
func (b *DeviceInfoReplyHead) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Status).u32(&b.Reserved).u64(&b.InfoLen)
}

// fields passes the body.
func (b *Attach) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Arena).u32(&b.Reserved).u64(&b.Size)
}

// fields passes the body.
func (b *AttachReply) fields(c *fieldCodec) *fieldCodec { return c.u32(&b.Status).u32(&b.Reserved) }

// fields passes the body.
func (b *BufferCreate) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Device).u32(&b.Buffer).u64(&b.Size).u32(&b.Flags).u32(&b.Reserved).u64(&b.Event)
}

// fields passes the body.
func (b *BufferFree) fields(c *fieldCodec) *fieldCodec { return c.u32(&b.Buffer).u32(&b.Reserved) }

// fields passes the body.
func (b *Transfer) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Buffer).u32(&b.Arena).u64(&b.Offset).u64(&b.ArenaOffset).u64(&b.Length).u64(&b.Event)
}

// fields passes the body.
func (b *Copy) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Src).u32(&b.Dst).u64(&b.SrcOffset).u64(&b.DstOffset).u64(&b.Length).u64(&b.Event)
}

// fields passes the body.
func (b *Fill) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Buffer).u32(&b.PatternLen).u64(&b.Offset).u64(&b.Length).u64(&b.Event).bytes(b.Pattern[:])
}

// fields passes the body.
func (b *Build) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Device).u32(&b.Program).u32(&b.Arena).u32(&b.Flags).u64(&b.SrcOffset).
		u32(&b.SrcLen).u32(&b.OptsLen).u64(&b.OptsOffset).u64(&b.OutOffset).u64(&b.OutCap)
}

// fields passes the body.
func (b *BuildReply) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Status).u32(&b.Reserved).u64(&b.LogLen).u64(&b.InfoLen)
}

// fields passes the body.
func (b *ProgramFree) fields(c *fieldCodec) *fieldCodec { return c.u32(&b.Program).u32(&b.Reserved) }

// fields passes the body.
func (b *ProgramInfo) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Program).u32(&b.Arena).u64(&b.OutOffset).u64(&b.OutCap)
}

// fields passes the body.
func (b *ProgramInfoReply) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Status).u32(&b.Reserved).u64(&b.InfoLen)
}

// fields passes the head.
func (h *LaunchHead) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&h.Program).u32(&h.Flags).u32(&h.WorkDim).u32(&h.NumArgs).
		u64s(h.GlobalOffset[:]).u64s(h.GlobalSize[:]).u64s(h.LocalSize[:]).bytes(h.Kernel[:]).u64(&h.Event)
}

// fields passes the entry.
func (a *LaunchArg) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&a.Kind).u32(&a.Size).u64(&a.Value)
}

// fields passes the body.
func (b *Marker) fields(c *fieldCodec) *fieldCodec { return c.u64(&b.Event) }

// fields passes the head.
func (h *WaitHead) fields(c *fieldCodec) *fieldCodec { return c.u32(&h.Count).u32(&h.Reserved) }

// fields passes the head.
func (h *WaitReplyHead) fields(c *fieldCodec) *fieldCodec { return c.u32(&h.Count).u32(&h.Pending) }

// fields passes the record.
func (e *EventRecord) fields(c *fieldCodec) *fieldCodec {
	return c.u64(&e.Event).u32(&e.Status).u32(&e.Reserved).u64(&e.SubmitNs).u64(&e.StartNs).u64(&e.EndNs)
}

// fields passes the head.
func (h *ErrorHead) fields(c *fieldCodec) *fieldCodec {
	return c.u32((*uint32)(&h.Code)).u32(&h.Reserved)
}

// fields passes nothing: the body is empty.
func (*Flush) fields(c *fieldCodec) *fieldCodec { return c }

// fields passes the body (none).
func (*Kick) fields(c *fieldCodec) *fieldCodec { return c }

// fields passes the body (none).
func (*Drain) fields(c *fieldCodec) *fieldCodec { return c }

// fields passes the body.
func (b *Queue) fields(c *fieldCodec) *fieldCodec {
	return c.u32(&b.Flags).u32(&b.Reserved).u64(&b.Size)
}

// fields passes the body.
func (b *QueueReply) fields(c *fieldCodec) *fieldCodec { return c.u32(&b.Status).u32(&b.Reserved) }
