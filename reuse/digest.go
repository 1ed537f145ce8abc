package reuse

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// Digest identifies content or a launch. Digests that cross instances
// (shared domains) are SHA-256; digests inside a private domain may be
// XXH3-128 keyed with a secret seed of that domain (see Domain.Content).
type Digest [32]byte

// String returns the first 8 bytes in hex.
func (d Digest) String() string { return hex.EncodeToString(d[:8]) }

// Key identifies a launch: equal keys mean equal results (for the kernels
// this package lets through).
type Key Digest

// String returns the first 8 bytes in hex.
func (k Key) String() string { return Digest(k).String() }

// Tags separate the digest spaces so that a content digest can never
// equal a derived one.
const (
	tagContent  = 'c'
	tagFast     = 'f'
	tagOutput   = 'o'
	tagFresh    = 'z'
	tagSample   = 's'
	tagProgram  = 'p'
	tagLaunch   = 'l'
	keyVersion  = 1
	fastVersion = 1
)

// SHA256 is the cryptographic content digest of data.
func SHA256(data []byte) Digest {
	h := sha256.New()
	h.Write([]byte{tagContent})
	h.Write(data)
	var d Digest
	h.Sum(d[:0])
	return d
}

// fastDigest is XXH3-128 of data under seed, tagged so it never equals a
// SHA-256 digest by construction of the tag byte.
func fastDigest(data []byte, seed uint64) Digest { return fastTagged(tagContent, data, seed) }

// fastTagged is fastDigest for one digest space (tagContent, tagLaunch,
// tagOutput): digests of different spaces never compare equal.
func fastTagged(space byte, data []byte, seed uint64) Digest {
	u := xxh3.Hash128Seed(data, seed)
	var d Digest
	d[0] = tagFast
	d[1] = fastVersion
	d[2] = space
	binary.LittleEndian.PutUint64(d[8:], u.Hi)
	binary.LittleEndian.PutUint64(d[16:], u.Lo)
	binary.LittleEndian.PutUint64(d[24:], uint64(len(data)))
	return d
}

// sampleWindows and sampleWindow shape SampleDigest: data up to
// sampleWindows*sampleWindow*16 bytes is hashed whole.
const (
	sampleWindows = 64
	sampleWindow  = 64
)

// SampleDigest is a fingerprint of data that reads only 64 windows of 64
// bytes spread evenly over it (all of data up to 64 KiB), XXH3-128 under
// seed. Equal data give equal samples, so data whose sample was never seen
// was never seen either; different data may share a sample. It is a
// filter in front of hashing, never a name for content: a forged sample
// collision only makes vgpud hash the data.
func SampleDigest(data []byte, seed uint64) Digest {
	n := len(data)
	var d Digest
	d[0] = tagSample
	d[1] = fastVersion
	binary.LittleEndian.PutUint64(d[24:], uint64(n))
	if n <= sampleWindows*sampleWindow*16 {
		u := xxh3.Hash128Seed(data, seed)
		binary.LittleEndian.PutUint64(d[8:], u.Hi)
		binary.LittleEndian.PutUint64(d[16:], u.Lo)
		return d
	}
	var buf [sampleWindows * sampleWindow]byte
	for i := 0; i < sampleWindows; i++ {
		at := (n - sampleWindow) / (sampleWindows - 1) * i
		copy(buf[i*sampleWindow:], data[at:at+sampleWindow])
	}
	u := xxh3.Hash128Seed(buf[:], seed)
	binary.LittleEndian.PutUint64(d[8:], u.Hi)
	binary.LittleEndian.PutUint64(d[16:], u.Lo)
	return d
}

// Fresh is the digest of a freshly created buffer of size bytes that was
// never written: all zeros (gpu.Queue.Alloc clears new buffers).
func Fresh(size uint64) Digest {
	var b [9]byte
	b[0] = tagFresh
	binary.LittleEndian.PutUint64(b[1:], size)
	return sha256.Sum256(b[:])
}

// OutputDigest is the content digest of the buffer a launch with key k
// left at argument arg: derived from the key (as a build system's action
// cache does), so chained launches need no hashing of device data. This
// is the cryptographic form, as shared domains use it (Domain.Output).
func OutputDigest(k Key, arg int) Digest {
	return sha256.Sum256(outputName(k, arg))
}

func outputName(k Key, arg int) []byte {
	b := make([]byte, 1+32+4)
	b[0] = tagOutput
	copy(b[1:], k[:])
	binary.LittleEndian.PutUint32(b[33:], uint32(arg))
	return b
}

// ProgramDigest identifies a program by its source and build options.
func ProgramDigest(source, options string) Digest {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte{tagProgram})
	binary.LittleEndian.PutUint64(n[:], uint64(len(source)))
	h.Write(n[:])
	h.Write([]byte(source))
	binary.LittleEndian.PutUint64(n[:], uint64(len(options)))
	h.Write(n[:])
	h.Write([]byte(options))
	var d Digest
	h.Sum(d[:0])
	return d
}

// KeyBuilder forms a launch key. Every field is length- or kind-prefixed,
// so distinct launches never serialise to the same bytes. The fields are
// gathered in one buffer and hashed once: a key is formed for every
// candidate launch, so it must cost little next to a launch.
type KeyBuilder struct {
	buf []byte
}

// NewKey starts a launch key for kernel of the program with digest prog,
// run on the device described by device (name and driver: results may
// differ between device models).
func NewKey(device string, prog Digest, kernel string) *KeyBuilder {
	kb := &KeyBuilder{buf: make([]byte, 0, 256)}
	kb.buf = append(kb.buf, tagLaunch, keyVersion)
	kb.str(device)
	kb.buf = append(kb.buf, prog[:]...)
	kb.str(kernel)
	return kb
}

func (kb *KeyBuilder) u64(v uint64) {
	kb.buf = binary.LittleEndian.AppendUint64(kb.buf, v)
}

func (kb *KeyBuilder) str(s string) {
	kb.u64(uint64(len(s)))
	kb.buf = append(kb.buf, s...)
}

// Range adds the ND-range.
func (kb *KeyBuilder) Range(dims int, offset, global, local [3]uint64) {
	kb.buf = append(kb.buf, 'r')
	kb.u64(uint64(dims))
	for i := 0; i < 3; i++ {
		kb.u64(offset[i])
		kb.u64(global[i])
		kb.u64(local[i])
	}
}

// Scalar adds a by-value argument.
func (kb *KeyBuilder) Scalar(b []byte) {
	kb.buf = append(kb.buf, 's')
	kb.u64(uint64(len(b)))
	kb.buf = append(kb.buf, b...)
}

// Local adds a __local argument of n bytes.
func (kb *KeyBuilder) Local(n uint64) {
	kb.buf = append(kb.buf, 'L')
	kb.u64(n)
}

// Buffer adds a buffer argument: its size and flags, its content digest,
// and alias, the index of the first argument naming the same buffer (its
// own index if none), since aliasing changes what a kernel computes.
func (kb *KeyBuilder) Buffer(size uint64, flags uint32, content Digest, alias int) {
	kb.buf = append(kb.buf, 'b')
	kb.u64(size)
	kb.u64(uint64(flags))
	kb.buf = append(kb.buf, content[:]...)
	kb.u64(uint64(alias))
}

// Sum returns the cryptographic key (SHA-256), as shared domains use it
// (Domain.Key).
func (kb *KeyBuilder) Sum() Key {
	return Key(sha256.Sum256(kb.buf))
}
