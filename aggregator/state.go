package aggregator

import (
	"sync/atomic"

	"github.com/vgpud/vgpud/gpu"
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
	used     atomic.Uint64 // device bytes held by buffers
}

type buffer struct {
	mem   gpu.Buffer
	size  uint64
	flags uint32
}

type program struct {
	prog    gpu.Program
	source  string
	options string
	flags   uint16
}

func newState() *state {
	return &state{
		buffers:  make(map[uint32]*buffer),
		programs: make(map[uint32]*program),
	}
}

func (p *program) release() { p.prog.Release() }

// freeAll releases every device object of the instance.
func (s *state) freeAll() {
	for h, b := range s.buffers {
		b.mem.Release()
		delete(s.buffers, h)
	}
	for h, p := range s.programs {
		p.release()
		delete(s.programs, h)
	}
	s.used.Store(0)
}
