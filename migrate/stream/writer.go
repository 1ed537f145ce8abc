package stream

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Stats count what a Writer wrote.
type Stats struct {
	// Records and Bytes are the records and bytes written, Header, End
	// and record headers included.
	Records uint64
	Bytes   uint64
	// DataBytes are the buffer bytes given to BufferData; DataEncoded
	// the bytes that carried them (the data fields of BufferData
	// payloads, without headers and fixed fields).
	DataBytes   uint64
	DataEncoded uint64
	// Chunks by encoding: ZeroChunks were elided, ZstdChunks
	// compressed, RawChunks sent as they are.
	ZeroChunks uint64
	ZstdChunks uint64
	RawChunks  uint64
}

// Writer writes a stream: Header before the first record, the records
// given to Write and BufferData, End in Close. Every record is one Write
// call on the underlying io.Writer; wrap it in a bufio.Writer to batch
// small records (and flush it after Close). A Writer is not safe for
// concurrent use.
type Writer struct {
	w       io.Writer
	buf     []byte // the record being built: header, then payload
	enc     *zstd.Encoder
	started bool
	closed  bool
	err     error // sticky: the first error of w
	stats   Stats
	payload uint64 // payload bytes written, for End
}

// NewWriter returns a Writer that writes a stream to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Stats returns what the Writer wrote so far.
func (w *Writer) Stats() Stats { return w.stats }

// Write writes one record. *BufferData goes through BufferData (Data
// longer than MaxChunk is split; empty Data is refused). *Header and *End are the Writer's own
// and refused. A record with a field out of range returns an error
// wrapping ErrInvalid and writes nothing; an error of the underlying
// writer sticks, and every later call returns it.
func (w *Writer) Write(r Record) error {
	switch r := r.(type) {
	case nil:
		return fmt.Errorf("write nil record: %w", ErrInvalid)
	case *BufferData:
		if len(r.Data) == 0 {
			return w.invalid(r.Type(), r.check())
		}
		return w.BufferData(r.Handle, r.Offset, r.Data)
	case *Header, *End:
		return fmt.Errorf("write %v: written by the Writer itself: %w", r.Type(), ErrInvalid)
	}
	if err := w.usable(); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return w.invalid(r.Type(), err)
	}
	if err := w.start(); err != nil {
		return err
	}
	return w.record(r.Type(), r.appendPayload(w.begin()))
}

// BufferData writes bytes [offset, offset+len(data)) of buffer handle as
// BufferData records of at most MaxChunk bytes each. For each chunk it
// picks the encoding: Zero for an all-zero chunk, else Zstd when the
// frame saves at least an eighth of the chunk, else Raw. It does not
// keep data. Empty data writes nothing.
func (w *Writer) BufferData(handle uint32, offset uint64, data []byte) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := checkRange(handle, offset, uint64(len(data))); err != nil {
		return w.invalid(TypeBufferData, err)
	}
	// The whole range is valid, so every chunk of it is.
	if len(data) == 0 {
		return nil
	}
	if err := w.start(); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), MaxChunk)
		if err := w.chunk(handle, offset, data[:n]); err != nil {
			return err
		}
		offset += uint64(n)
		data = data[n:]
	}
	return nil
}

// Close writes End. It does not close the underlying writer. Closing
// again returns nil.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	defer w.release()
	if w.err != nil {
		return w.err
	}
	if err := w.start(); err != nil {
		return err
	}
	end := &End{Records: w.stats.Records, PayloadBytes: w.payload}
	return w.record(TypeEnd, end.appendPayload(w.begin()))
}

func (w *Writer) release() {
	w.closed = true
	w.buf = nil
	if w.enc != nil {
		w.enc.Close()
		w.enc = nil
	}
}

func (w *Writer) usable() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

// invalid reports a refused record by the number it would have had.
func (w *Writer) invalid(t Type, err error) error {
	n := w.stats.Records
	if !w.started {
		n++ // after the Header not yet written
	}
	return fmt.Errorf("record %d (%v): %w: %w", n, t, err, ErrInvalid)
}

// start writes Header before the first record.
func (w *Writer) start() error {
	if w.started {
		return nil
	}
	w.started = true
	h := &Header{Major: Major, Minor: Minor}
	return w.record(TypeHeader, h.appendPayload(w.begin()))
}

// begin returns the record buffer with room for the header.
func (w *Writer) begin() []byte {
	return append(w.buf[:0], make([]byte, HeaderSize)...)
}

// record fills in the header of b (a header and payload) and writes it.
func (w *Writer) record(t Type, b []byte) error {
	w.buf = b
	p := b[HeaderSize:]
	recordHeader{Type: t, Len: uint32(len(p)), CRC: crc32.Checksum(p, castagnoli)}.put(b)
	n, err := w.w.Write(b)
	w.stats.Bytes += uint64(n)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("record %d (%v): %w", w.stats.Records, t, err)
		return w.err
	}
	w.stats.Records++
	w.payload += uint64(len(p))
	return nil
}

// zeros is compared against to find all-zero chunks.
var zeros [4096]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// chunk writes one BufferData record of 1..MaxChunk bytes.
func (w *Writer) chunk(handle uint32, offset uint64, data []byte) error {
	w.stats.DataBytes += uint64(len(data))
	if allZero(data) {
		w.stats.ZeroChunks++
		return w.record(TypeBufferData, appendChunkFixed(w.begin(), handle, EncodingZero, offset, len(data)))
	}
	b := appendChunkFixed(w.begin(), handle, EncodingZstd, offset, len(data))
	start := len(b)
	enc, err := w.encoder()
	if err != nil {
		return err
	}
	// A large chunk whose head does not compress is sent raw without
	// trying the rest: compressing incompressible data (the usual content
	// of device buffers: floats, hashes) costs more CPU than the copy.
	if len(data) > 2*probeBytes && !saves(enc.EncodeAll(data[:probeBytes], b[start:start]), probeBytes) {
		b = append(b[:start], data...)
		b[HeaderSize+4] = byte(EncodingRaw)
		w.stats.RawChunks++
		w.stats.DataEncoded += uint64(len(data))
		return w.record(TypeBufferData, b)
	}
	b = enc.EncodeAll(data, b)
	if n := len(b) - start; saves(b[start:], len(data)) {
		w.stats.ZstdChunks++
		w.stats.DataEncoded += uint64(n)
		return w.record(TypeBufferData, b)
	}
	b = append(b[:start], data...)
	b[HeaderSize+4] = byte(EncodingRaw)
	w.stats.RawChunks++
	w.stats.DataEncoded += uint64(len(data))
	return w.record(TypeBufferData, b)
}

// probeBytes is how much of a large chunk is compressed first to decide
// whether the rest is worth compressing.
const probeBytes = 64 << 10

// saves reports whether compressed output enc of n bytes saves an eighth.
func saves(enc []byte, n int) bool { return len(enc) <= n-n/8 }

// encoder returns the Writer's zstd encoder, made on first use. It runs
// in the caller's goroutine (no concurrency, EncodeAll only); its frames
// are single-segment, so they always declare their content size, which
// the Reader requires; they carry no checksum of their own: the record's
// CRC-32C covers them.
func (w *Writer) encoder() (*zstd.Encoder, error) {
	if w.enc == nil {
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1),
			zstd.WithSingleSegment(true),
			zstd.WithEncoderCRC(false),
			zstd.WithWindowSize(MaxChunk),
			zstd.WithLowerEncoderMem(true))
		if err != nil {
			w.err = fmt.Errorf("zstd encoder: %w", err)
			return nil, w.err
		}
		w.enc = enc
	}
	return w.enc, nil
}
