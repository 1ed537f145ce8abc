package wire

import (
	"math"
	"unicode/utf8"

	"github.com/vgpud/vgpud/internal/codec"
)

// encoder appends a message's fields (internal/codec), with the worker
// protocol's booleans (a u32 0 or 1), strings and byte fields (a u32
// length).
type encoder struct{ codec.Writer }

func (e *encoder) i64(v int64) { e.U64(uint64(v)) }

func (e *encoder) bool(v bool) {
	if v {
		e.U32(1)
	} else {
		e.U32(0)
	}
}

// str writes a u32 length and the bytes, cut at max (the decoder refuses
// longer ones).
func (e *encoder) str(s string, max int) {
	if len(s) > max {
		s = s[:max]
	}
	e.U32(uint32(len(s)))
	e.Str(s)
}

func (e *encoder) bytes(b []byte, max int) {
	if len(b) > max {
		b = b[:max]
	}
	e.U32(uint32(len(b)))
	e.Raw(b)
}

// decoder reads a message's fields (internal/codec: the first failure
// sticks, as an ErrProtocol, and every later read returns zero, so a
// decode function reads straight through and checks once).
type decoder struct{ codec.Reader }

func newDecoder(b []byte) decoder {
	return decoder{codec.NewReader(b, func(msg string) error { return protoErr("%s", msg) })}
}

// nonNeg reads an int64 that must not be negative.
func (d *decoder) nonNeg() int64 {
	v := d.U64()
	if v > math.MaxInt64 {
		d.Fail("negative value %d", int64(v))
		return 0
	}
	return int64(v)
}

func (d *decoder) bool() bool {
	switch v := d.U32(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.Fail("boolean %d", v)
		return false
	}
}

// str reads a length-prefixed UTF-8 string of at most max bytes.
func (d *decoder) str(max int) string {
	b := d.bytes(max)
	if d.Err() == nil && !utf8.Valid(b) {
		d.Fail("string is not UTF-8")
		return ""
	}
	return string(b)
}

func (d *decoder) bytes(max int) []byte {
	v := d.Bounded("field", uint64(d.U32()), max)
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

// done reports the first error of a body's decoding, or trailing bytes.
func (d *decoder) done(what string) error { return d.Done(what) }
