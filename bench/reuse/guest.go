package main

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
)

// ram is guest RAM as a byte slice starting at gpa 0.
type ram struct {
	mu sync.RWMutex
	b  []byte
}

func (m *ram) check(gpa uint64, n int) error {
	if gpa > uint64(len(m.b)) || uint64(len(m.b))-gpa < uint64(n) {
		return abi.Errorf(abi.StatusBadAddress, "%#x+%d outside RAM", gpa, n)
	}
	return nil
}

func (m *ram) ReadAt(p []byte, gpa uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.check(gpa, len(p)); err != nil {
		return err
	}
	copy(p, m.b[gpa:])
	return nil
}

func (m *ram) WriteAt(p []byte, gpa uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(gpa, len(p)); err != nil {
		return err
	}
	copy(m.b[gpa:], p)
	return nil
}

func (m *ram) Store64(gpa, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return m.WriteAt(b[:], gpa)
}

const (
	ringBase  = 0x1000
	complBase = 0x2000
	slots     = 64
	scratch   = 0x10000 // SG tables and descriptors
	dataBase  = 1 << 20 // per-buffer staging areas
)

// guest plays a guest driver against one instance: every buffer has a
// fixed, contiguous staging area in guest RAM.
type guest struct {
	mem   *ram
	in    *aggregator.Instance
	tail  uint32
	done  chan uint32
	next  uint64 // scratch bump pointer, reset per submit
	areas map[uint32]uint64
	top   uint64
}

func newGuest(d *aggregator.Device, id string, ramBytes int) (*guest, error) {
	g := &guest{mem: &ram{b: make([]byte, ramBytes)}, done: make(chan uint32, 1024), areas: map[uint32]uint64{}, top: dataBase, next: scratch}
	in, err := d.NewInstance(aggregator.InstanceConfig{ID: id, Profile: "bench", MemBytes: uint64(ramBytes), Memory: g.mem,
		Notify: func(i uint32) {
			select {
			case g.done <- i:
			default:
			}
		}})
	if err != nil {
		return nil, err
	}
	g.in = in
	if err := in.EnableRing(aggregator.RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots}); err != nil {
		in.Close()
		return nil, err
	}
	return g, nil
}

func (g *guest) scratchAlloc(n int) uint64 {
	a := g.next
	g.next += (uint64(n) + 4095) &^ 4095
	return a
}

// area returns buffer h's staging area of n bytes.
func (g *guest) area(h uint32, n uint64) uint64 {
	if a, ok := g.areas[h]; ok {
		return a
	}
	a := g.top
	g.top += (n + 4095) &^ 4095
	g.areas[h] = a
	return a
}

// sgFor writes a one-entry SG table per page run (entries are u32 long).
func (g *guest) sgFor(addr, n uint64) (uint64, uint32) {
	count := uint32((n + (1 << 30) - 1) >> 30)
	table := g.scratchAlloc(int(count) * abi.SGEntrySize)
	for i := uint32(0); i < count; i++ {
		l := min(n-uint64(i)<<30, 1<<30)
		e := abi.SGEntry{Addr: addr + uint64(i)<<30, Len: uint32(l)}
		var b [abi.SGEntrySize]byte
		e.Marshal(b[:])
		g.mem.WriteAt(b[:], table+uint64(i)*abi.SGEntrySize)
	}
	return table, count
}

func (g *guest) create(h uint32, n uint64) abi.Command {
	g.area(h, n)
	return abi.NewCommand(&abi.BufferCreate{Handle: h, Size: n}, 0, 0)
}

func (g *guest) upload(h uint32, data []byte) abi.Command {
	a := g.area(h, uint64(len(data)))
	g.mem.WriteAt(data, a)
	t, c := g.sgFor(a, uint64(len(data)))
	return abi.NewCommand(&abi.Copy{ToDevice: true, Handle: h, SGCount: c, Length: uint64(len(data)), SGAddr: t}, 0, 0)
}

func (g *guest) download(h uint32, n uint64) abi.Command {
	t, c := g.sgFor(g.area(h, n), n)
	return abi.NewCommand(&abi.Copy{Handle: h, SGCount: c, Length: n, SGAddr: t}, 0, 0)
}

func (g *guest) build(h uint32, src string) abi.Command {
	a := g.scratchAlloc(len(src))
	g.mem.WriteAt([]byte(src), a)
	t, c := g.sgFor(a, uint64(len(src)))
	return abi.NewCommand(&abi.ProgramBuild{Handle: h, SrcCount: c, SrcLen: uint64(len(src)), SrcSGAddr: t}, 0, 0)
}

func (g *guest) launch(prog uint32, d abi.LaunchDesc) abi.Command {
	b, err := d.Marshal()
	if err != nil {
		panic(err)
	}
	a := g.scratchAlloc(len(b))
	g.mem.WriteAt(b, a)
	return abi.NewCommand(&abi.Launch{Program: prog, DescLen: uint32(len(b)), DescAddr: a}, 0, 0)
}

// run submits cmds (at most slots) and waits for all of them.
func (g *guest) run(cmds ...abi.Command) error {
	defer func() { g.next = scratch }()
	first := g.tail
	for _, c := range cmds {
		var b [abi.CommandSize]byte
		c.Marshal(b[:])
		g.mem.WriteAt(b[:], ringBase+uint64(g.tail%slots)*abi.CommandSize)
		g.tail++
	}
	if err := g.in.Doorbell(g.tail); err != nil {
		return err
	}
	for i := range cmds {
		idx := first + uint32(i)
		deadline := time.After(10 * time.Minute)
		for {
			var rb [abi.ComplSize]byte
			g.mem.ReadAt(rb[:], complBase+uint64(idx%slots)*abi.ComplSize)
			rec, _ := abi.UnmarshalCompletion(rb[:])
			if rec.Seq == uint64(idx)+1 {
				if rec.Status != abi.StatusOK {
					return fmt.Errorf("command %d (%v): %v", idx, rec.Opcode, rec.Status)
				}
				break
			}
			select {
			case <-g.done:
			case <-deadline:
				return fmt.Errorf("command %d did not complete", idx)
			}
		}
	}
	return nil
}
