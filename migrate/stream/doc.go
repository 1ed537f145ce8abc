// Package stream defines the byte format of a vGPU instance's
// live-migration stream (docs/migration.md "Stream format"), once, for
// both ends: the process that saves an instance writes it with a Writer,
// the one that restores it reads it with a Reader.
//
// A stream is a sequence of records, each a 16-byte little-endian header
// (type, flags, payload length, CRC-32C of the payload) and a payload of
// fixed layout per type. Header opens the stream with a magic and a
// version; End closes it with the number of records and payload bytes
// before it, which the Reader checks. Buffer contents travel in
// BufferData records of at most MaxChunk bytes, each elided when all
// zero, zstd-compressed when that saves an eighth, else raw.
//
// The package owns the framing, the versioning rules (a major version
// the Reader refuses with ErrVersion; minor versions that may add record
// types, which an older Reader skips when they are marked skippable),
// the checksums, the encodings and every limit (the Max* constants). A
// Reader takes hostile bytes: it bounds every length against those
// limits before it reads or allocates, bounds zstd output to the
// chunk's declared length, never panics, and wraps ErrVersion,
// ErrCorrupt or ErrTruncated in every error about the bytes. Writer.Write
// and the Reader share one check per record type, so Write never writes
// a record a Reader refuses.
//
// The package knows nothing of instances, workers, devices or the
// transport that carries the stream. It checks that each field is within
// the format's limits and that reserved fields are zero, not what the
// values mean: the consumer validates semantic values, such as ring
// positions and addresses against the device ABI, handles against the
// ones it has seen, and the order of records between Header and End. It
// is a leaf: it imports nothing else from vgpud.
package stream
