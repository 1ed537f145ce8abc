package stream

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Raw is one record as it travels: its type and payload, checked but not
// decoded. A daemon that only relays records (from a worker to the
// network, from the network to a worker) passes them on as Raw, without
// decompressing buffer data only to compress it again.
type Raw struct {
	Type    Type
	Payload []byte // valid until the next call on the Reader that returned it
}

// NextRaw is Next without decoding: the record's framing and checksum are
// checked, and its payload as far as that needs no decompression (a
// BufferData's fixed fields, every other type wholly). Header is checked
// and returned like any record; End's totals are checked, then io.EOF.
// Unknown skippable records are skipped.
func (r *Reader) NextRaw() (Raw, error) {
	if r.err != nil {
		return Raw{}, r.err
	}
	raw, err := r.nextRaw()
	if err != nil {
		r.err = err
		r.release()
		return Raw{}, err
	}
	if raw.Type == TypeEnd {
		r.err = io.EOF
		raw.Payload = append([]byte(nil), raw.Payload...) // release frees the buffer
		r.release()
	}
	return raw, nil
}

func (r *Reader) nextRaw() (Raw, error) {
	for {
		if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
			return Raw{}, r.readErr(0, "record header", err)
		}
		h, err := parseRecordHeader(r.hdr[:])
		if err != nil {
			return Raw{}, r.corrupt(h.Type, err)
		}
		if (r.records == 0) != (h.Type == TypeHeader) {
			return Raw{}, r.corrupt(h.Type, errors.New("a header must come first, and only first"))
		}
		p, err := r.readPayload(int(h.Len))
		if err != nil {
			return Raw{}, r.readErr(h.Type, "payload", err)
		}
		if sum := crc32.Checksum(p, castagnoli); sum != h.CRC {
			return Raw{}, r.corrupt(h.Type, fmt.Errorf("payload checksum %#08x, header says %#08x", sum, h.CRC))
		}
		if !h.Type.known() {
			if h.Flags&FlagSkippable == 0 {
				return Raw{}, r.corrupt(h.Type, errors.New("unknown record type, not skippable"))
			}
			r.count(p)
			continue
		}
		if h.Type == TypeBufferData {
			if _, err := parseChunk(p); err != nil {
				return Raw{}, r.corrupt(h.Type, err)
			}
		} else {
			rec, err := r.decode(h.Type, p)
			if err != nil {
				return Raw{}, r.corrupt(h.Type, err)
			}
			if e, ok := rec.(*End); ok && (e.Records != r.records || e.PayloadBytes != r.payload) {
				return Raw{}, r.corrupt(h.Type, fmt.Errorf("totals %d records, %d payload bytes; read %d, %d",
					e.Records, e.PayloadBytes, r.records, r.payload))
			}
		}
		r.count(p)
		return Raw{Type: h.Type, Payload: p}, nil
	}
}

// Decode decodes a raw record (BufferData's data included).
func (raw Raw) Decode() (Record, error) {
	var r Reader
	defer r.release()
	rec, err := r.decode(raw.Type, raw.Payload)
	if err != nil {
		return nil, fmt.Errorf("%v: %w: %w", raw.Type, ErrCorrupt, err)
	}
	return rec, nil
}

// WriteRaw writes a record another stream carried, unchanged but for its
// header (its checksum recomputed over the payload, which NextRaw
// checked). Header and End are the Writer's own and refused.
func (w *Writer) WriteRaw(raw Raw) error {
	if raw.Type == TypeHeader || raw.Type == TypeEnd || !raw.Type.known() {
		return fmt.Errorf("write raw %v: %w", raw.Type, ErrInvalid)
	}
	if err := w.usable(); err != nil {
		return err
	}
	if len(raw.Payload) > raw.Type.maxPayload() {
		return w.invalid(raw.Type, fmt.Errorf("payload of %d bytes", len(raw.Payload)))
	}
	if err := w.start(); err != nil {
		return err
	}
	return w.record(raw.Type, append(w.begin(), raw.Payload...))
}
