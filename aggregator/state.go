package aggregator

import (
	"sync/atomic"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

// Limits on host-side bookkeeping per instance, so that a guest cannot grow
// vgpud's own memory without bound.
const (
	maxBuffers  = 1 << 16
	maxPrograms = 1 << 10
)

// state is an instance's handle tables: everything a migration must move.
// Only the instance's worker touches it (used is also read atomically).
type state struct {
	buffers  map[uint32]*buffer
	programs map[uint32]*program
	used     *atomic.Uint64 // device bytes held by buffers (the instance's Shared.MemUsed)
	objects  atomic.Int64   // buffers and programs held, read by any goroutine (Holds)
	progUsed *atomic.Uint64 // bytes of programs held (the instance's Shared.ProgramBytes)
	rs       reuseState     // result reuse (reuse.go)
}

type buffer struct {
	mem   gpu.Buffer
	size  uint64
	flags uint32

	// Result reuse (reuse.go). Zero values: content unknown, the device
	// copy current.
	digest     reuse.Digest
	known      bool   // digest describes the content (once computed)
	lazy       []byte // if set, digest is not computed yet: it is the content digest of these bytes (the last whole upload)
	repeat     bool   // the content came from a launch seen before (recorded or answered): launches reading it are recorded at their first miss
	host       []byte // content not yet on the device; immutable
	hostUpload bool   // host is a pending upload (not a shadow result)
	fill       []byte // sequential partial uploads from offset 0 not yet on the device (fill[:filled])
	filled     uint64
	spare      []byte       // a former pending upload's bytes, reused by the next one
	producer   *reuse.Entry // uncaptured recorded output the device copy holds
	prodDom    *reuse.Domain
	outIdx     int

	gen uint64 // changes whenever the content may have (Instance.touch): migration's dirty tracking
}

type program struct {
	prog    gpu.Program
	charged uint64 // bytes counted against the program quota
	source  string
	options string
	flags   uint16
	warned  bool           // the build log had warnings: never reused
	info    *reuse.Program // parsed signatures, on first launch with reuse on (reuse.go)
	digest  reuse.Digest
}

func newState() *state {
	return &state{
		buffers:  make(map[uint32]*buffer),
		programs: make(map[uint32]*program),
	}
}

func (p *program) release() { p.prog.Release() }

// freeAll releases every device object of the instance and returns the
// bytes of buffers it held.
func (s *state) freeAll() uint64 {
	held := s.used.Load()
	for h, b := range s.buffers {
		b.mem.Release()
		delete(s.buffers, h)
	}
	for h, p := range s.programs {
		p.release()
		delete(s.programs, h)
	}
	s.used.Store(0)
	s.objects.Store(0)
	s.progUsed.Store(0)
	return held
}
