package stream

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// minGrow is the least a Reader grows its payload buffer by while the
// bytes of a long payload arrive.
const minGrow = 64 << 10

// Reader reads a stream. It reads exactly the stream's bytes, nothing
// past End, so the transport may carry more after it; each record is two
// reads of the underlying io.Reader, so wrap it in a bufio.Reader when
// reads are costly. A Reader is not safe for concurrent use.
type Reader struct {
	r       io.Reader
	hdr     [HeaderSize]byte
	buf     []byte // the payload being read
	dec     *zstd.Decoder
	records uint64 // records read, skipped ones included
	payload uint64 // their payload bytes
	err     error  // sticky: the first error, io.EOF after End
}

// NewReader returns a Reader that reads a stream from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Next returns the next record: *Header first, then the stream's
// records, *End last (its totals checked), then io.EOF. Records of a
// type this version does not know are skipped when their header marks
// them skippable. A returned record, BufferData's decoded Data included,
// shares no memory with the Reader.
//
// On error the record is nil and every later call returns the same
// error. Errors about the stream's bytes wrap ErrVersion (a major
// version other than Major), ErrTruncated (the stream ended before End;
// also wraps io.ErrUnexpectedEOF) or ErrCorrupt (anything else) and name
// the record by number (Header is record 0) and type. An error of the
// underlying reader is returned wrapped with the record's number.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return nil, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
		r.release()
		return nil, err
	}
	if rec.Type() == TypeEnd {
		r.err = io.EOF
		r.release()
	}
	return rec, nil
}

func (r *Reader) release() {
	r.buf = nil
	if r.dec != nil {
		r.dec.Close()
		r.dec = nil
	}
}

func (r *Reader) corrupt(t Type, err error) error {
	if errors.Is(err, ErrVersion) {
		return fmt.Errorf("record %d (%v): %w", r.records, t, err)
	}
	return fmt.Errorf("record %d (%v): %w: %w", r.records, t, err, ErrCorrupt)
}

// readErr reports a failed read of record's header (t is 0: not known
// yet) or payload.
func (r *Reader) readErr(t Type, what string, err error) error {
	rec := fmt.Sprintf("record %d", r.records)
	if t != 0 {
		rec += fmt.Sprintf(" (%v)", t)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: stream ends in the %s, before end: %w: %w", rec, what, ErrTruncated, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("%s: read %s: %w", rec, what, err)
}

func (r *Reader) next() (Record, error) {
	for {
		if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
			return nil, r.readErr(0, "record header", err)
		}
		h, framingErr := parseRecordHeader(r.hdr[:])
		first := r.records == 0
		if first {
			// Header's flags and reserved field are judged after its
			// version, so that a stream of another major version is
			// reported as such: what stays put in every major version
			// is the record header's type, length and checksum, and
			// Header's magic and major.
			if h.Type != TypeHeader {
				return nil, r.corrupt(h.Type, errors.New("first record is not a header"))
			}
			if h.Len > uint32(TypeHeader.maxPayload()) {
				return nil, r.corrupt(h.Type, fmt.Errorf("payload of %d bytes, max %d for the type", h.Len, TypeHeader.maxPayload()))
			}
		} else if framingErr != nil {
			return nil, r.corrupt(h.Type, framingErr)
		}
		p, err := r.readPayload(int(h.Len))
		if err != nil {
			return nil, r.readErr(h.Type, "payload", err)
		}
		if sum := crc32.Checksum(p, castagnoli); sum != h.CRC {
			return nil, r.corrupt(h.Type, fmt.Errorf("payload checksum %#08x, header says %#08x", sum, h.CRC))
		}
		if first {
			if _, err := decodeHeader(p); errors.Is(err, ErrVersion) {
				return nil, r.corrupt(h.Type, err)
			}
			if framingErr != nil {
				return nil, r.corrupt(h.Type, framingErr)
			}
		}
		if !h.Type.known() {
			if h.Flags&FlagSkippable == 0 {
				return nil, r.corrupt(h.Type, errors.New("unknown record type, not skippable"))
			}
			r.count(p)
			continue
		}
		if !first && h.Type == TypeHeader {
			return nil, r.corrupt(h.Type, errors.New("second header"))
		}
		rec, err := r.decode(h.Type, p)
		if err != nil {
			return nil, r.corrupt(h.Type, err)
		}
		if e, ok := rec.(*End); ok {
			if e.Records != r.records || e.PayloadBytes != r.payload {
				return nil, r.corrupt(h.Type, fmt.Errorf("totals %d records, %d payload bytes; read %d, %d",
					e.Records, e.PayloadBytes, r.records, r.payload))
			}
		}
		r.count(p)
		return rec, nil
	}
}

func (r *Reader) count(p []byte) {
	r.records++
	r.payload += uint64(len(p))
}

// readPayload reads n bytes (n already bounded by MaxPayload). A buffer
// too small grows no faster than the bytes arrive, so a length that lies
// about a short stream costs little memory.
func (r *Reader) readPayload(n int) ([]byte, error) {
	b := r.buf[:0]
	for len(b) < n {
		step := n - len(b)
		if cap(b) < n {
			step = min(step, max(len(b), minGrow))
		}
		b = slices.Grow(b, step)
		m, err := io.ReadFull(r.r, b[len(b):len(b)+step])
		b = b[:len(b)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	r.buf = b
	return b, nil
}

// decode decodes the payload p of a record of known type t.
func (r *Reader) decode(t Type, p []byte) (Record, error) {
	switch t {
	case TypeHeader:
		return decodeHeader(p)
	case TypeInstance:
		return decodeInstance(p)
	case TypeRound:
		return decodeRound(p)
	case TypeProgram:
		return decodeProgram(p)
	case TypeProgramFree:
		h, err := decodeHandle(p)
		if err != nil {
			return nil, err
		}
		return &ProgramFree{Handle: h}, nil
	case TypeBuffer:
		return decodeBuffer(p)
	case TypeBufferData:
		c, err := parseChunk(p)
		if err != nil {
			return nil, err
		}
		data, err := r.chunkData(c)
		if err != nil {
			return nil, err
		}
		return &BufferData{Handle: c.handle, Offset: c.offset, Data: data}, nil
	case TypeBufferFree:
		h, err := decodeHandle(p)
		if err != nil {
			return nil, err
		}
		return &BufferFree{Handle: h}, nil
	case TypeRing:
		return decodeRing(p)
	case TypeContext:
		return decodeContext(p)
	case TypeGuestPages:
		return decodeGuestPages(p)
	case TypeEnd:
		return decodeEnd(p)
	}
	return nil, fmt.Errorf("no decoder for %v", t)
}

// chunkData returns a chunk's raw_len bytes in a new slice.
func (r *Reader) chunkData(c chunk) ([]byte, error) {
	switch c.enc {
	case EncodingRaw:
		return bytes.Clone(c.data), nil
	case EncodingZero:
		return make([]byte, c.rawLen), nil
	}
	// Zstd. Check the frame header first: a frame that does not declare
	// exactly raw_len bytes is refused before anything is decoded. zstd
	// errors are formatted, not wrapped, so that none of theirs (such as
	// io.ErrUnexpectedEOF) leaks into a corruption error.
	var zh zstd.Header
	if err := zh.Decode(c.data); err != nil {
		return nil, fmt.Errorf("zstd frame header: %v", err)
	}
	if zh.Skippable || !zh.HasFCS || zh.FrameContentSize != uint64(c.rawLen) || zh.DictionaryID != 0 {
		return nil, fmt.Errorf("zstd frame declares %d bytes (known %t, dictionary %d), raw_len %d",
			zh.FrameContentSize, zh.HasFCS, zh.DictionaryID, c.rawLen)
	}
	dec, err := r.decoder()
	if err != nil {
		return nil, err
	}
	// With WithDecodeAllCapLimit the output never grows past cap(dst).
	out, err := dec.DecodeAll(c.data, make([]byte, 0, c.rawLen))
	if err != nil {
		return nil, fmt.Errorf("zstd: %v", err)
	}
	if len(out) != c.rawLen {
		return nil, fmt.Errorf("zstd frame decodes to %d bytes, raw_len %d", len(out), c.rawLen)
	}
	return out, nil
}

// decoder returns the Reader's zstd decoder, made on first use: DecodeAll
// only, in the caller's goroutine, output bounded by the destination's
// capacity and MaxChunk, window at most MaxChunk.
func (r *Reader) decoder() (*zstd.Decoder, error) {
	if r.dec == nil {
		dec, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(MaxChunk),
			zstd.WithDecoderMaxWindow(MaxChunk),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, fmt.Errorf("zstd decoder: %w", err)
		}
		r.dec = dec
	}
	return r.dec, nil
}
