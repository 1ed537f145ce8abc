// Package codec reads and writes the fixed-width little-endian fields of
// vgpud's binary formats: the worker protocol (worker/wire), the executor
// protocol (gpu/remote), the migration stream (migrate/stream) and the
// ICD protocol (guestagent/icdproto) encode and decode their records
// through it, each adding the few field kinds of its own (length-prefixed
// strings of its width, booleans, ranges).
//
// Reader is sticky: the first failure is kept and every later read
// returns zero, so a decode function reads a record straight through and
// checks once, at Done. It never panics on hostile input: every length is
// bounded by what is left before anything is sliced.
//
// It owns no format and knows no protocol: the caller says how its
// errors wrap (NewReader's wrap), which sentinel they satisfy and what
// its records hold.
package codec

import (
	"encoding/binary"
	"fmt"
)

// Writer appends little-endian fields to B.
type Writer struct{ B []byte }

func (w *Writer) U8(v uint8)    { w.B = append(w.B, v) }
func (w *Writer) U16(v uint16)  { w.B = binary.LittleEndian.AppendUint16(w.B, v) }
func (w *Writer) U32(v uint32)  { w.B = binary.LittleEndian.AppendUint32(w.B, v) }
func (w *Writer) U64(v uint64)  { w.B = binary.LittleEndian.AppendUint64(w.B, v) }
func (w *Writer) Raw(p []byte)  { w.B = append(w.B, p...) }
func (w *Writer) Str(s string)  { w.B = append(w.B, s...) }
func (w *Writer) Zero(n int)    { w.B = append(w.B, make([]byte, n)...) }
func (w *Writer) Len() int      { return len(w.B) }
func (w *Writer) Bytes() []byte { return w.B }

// Reader reads little-endian fields from a body; see the package comment.
type Reader struct {
	b    []byte
	err  error
	wrap func(msg string) error
}

// NewReader reads b; wrap makes the error of a failure from its message
// (nil: fmt.Errorf of the message alone), so that each format's errors
// satisfy its own sentinel.
func NewReader(b []byte, wrap func(msg string) error) Reader {
	return Reader{b: b, wrap: wrap}
}

// Fail records the first failure (later ones are dropped) and makes every
// later read return zero.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		msg := fmt.Sprintf(format, args...)
		if r.wrap != nil {
			r.err = r.wrap(msg)
		} else {
			r.err = fmt.Errorf("%s", msg)
		}
	}
	r.b = nil
}

// Err is the first failure, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the bytes left.
func (r *Reader) Len() int { return len(r.b) }

// Take returns the next n bytes (capped at n: an append to them never
// writes into the body), or nil after a failure or if fewer are left.
func (r *Reader) Take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.Fail("short body: %d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// Rest returns every byte left (nil after a failure).
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	v := r.b
	r.b = nil
	return v
}

func (r *Reader) U8() uint8 {
	if v := r.Take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *Reader) U16() uint16 {
	if v := r.Take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *Reader) U32() uint32 {
	if v := r.Take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *Reader) U64() uint64 {
	if v := r.Take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// Bounded takes a field of n bytes whose length was just read, refusing a
// length over max before it takes anything: what names the field in the
// failure.
func (r *Reader) Bounded(what string, n uint64, max int) []byte {
	if r.err == nil && n > uint64(max) {
		r.Fail("%s of %d bytes, max %d", what, n, max)
		return nil
	}
	return r.Take(int(n))
}

// Done is the first failure, or one if bytes are left over; what names
// the record.
func (r *Reader) Done(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.Fail("%s: %d trailing bytes", what, len(r.b))
	}
	return r.err
}
