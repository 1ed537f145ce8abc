package wire

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// encoder appends little-endian fields.
type encoder struct{ b []byte }

func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }

func (e *encoder) bool(v bool) {
	if v {
		e.u32(1)
	} else {
		e.u32(0)
	}
}

// str writes a u32 length and the bytes, cut at max (the decoder refuses
// longer ones).
func (e *encoder) str(s string, max int) {
	if len(s) > max {
		s = s[:max]
	}
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bytes(b []byte, max int) {
	if len(b) > max {
		b = b[:max]
	}
	e.u32(uint32(len(b)))
	e.b = append(e.b, b...)
}

// decoder reads little-endian fields; the first failure sticks in err and
// every later read returns zero, so a decode function reads straight
// through and checks once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = protoErr(format, args...)
	}
	d.b = nil
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("short payload: %d bytes wanted, %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// nonNeg reads an int64 that must not be negative.
func (d *decoder) nonNeg() int64 {
	v := d.u64()
	if v > math.MaxInt64 {
		d.fail("negative value %d", int64(v))
		return 0
	}
	return int64(v)
}

func (d *decoder) bool() bool {
	switch v := d.u32(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("boolean %d", v)
		return false
	}
}

// str reads a length-prefixed UTF-8 string of at most max bytes.
func (d *decoder) str(max int) string {
	b := d.bytes(max)
	if d.err == nil && !utf8.Valid(b) {
		d.fail("string is not UTF-8")
		return ""
	}
	return string(b)
}

func (d *decoder) bytes(max int) []byte {
	n := d.u32()
	if d.err == nil && int64(n) > int64(max) {
		d.fail("field of %d bytes, max %d", n, max)
		return nil
	}
	v := d.take(int(n))
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

// done reports the first error of a body's decoding, or trailing bytes.
func (d *decoder) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%s: %d trailing bytes", what, len(d.b))
	}
	return d.err
}
