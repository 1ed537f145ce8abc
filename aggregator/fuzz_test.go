package aggregator

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// FuzzCommands feeds a hostile guest's ring to a real instance: the fuzz
// input is both the command slots and the guest RAM they point into (so
// scatter-gather tables, launch descriptors and sources are arbitrary too).
// Whatever arrives, every command completes with some status, the worker
// keeps running and the instance can be closed.
func FuzzCommands(f *testing.F) {
	seed := func(cmds ...abi.Command) []byte {
		var b []byte
		for _, c := range cmds {
			var s [abi.CommandSize]byte
			c.Marshal(s[:])
			b = append(b, s[:]...)
		}
		return b
	}
	f.Add(seed(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 4096}, 0, 1),
		abi.NewCommand(&abi.Copy{ToDevice: true, Handle: 1, SGCount: 1, Length: 16, SGAddr: heap}, 0, 2),
		abi.NewCommand(&abi.Fence{Addr: fenceAddr, Value: 3}, 0, 3)))
	f.Add(seed(abi.NewCommand(&abi.ProgramBuild{Handle: 1, SrcCount: 1, SrcLen: 32, SrcSGAddr: heap}, 0, 1),
		abi.NewCommand(&abi.Launch{Program: 1, DescLen: abi.LaunchHeaderSize, DescAddr: heap + 64}, 0, 2)))
	d := NewDevice(openGPU(f), nil)
	f.Cleanup(func() { d.Close() })
	f.Fuzz(func(t *testing.T, in []byte) {
		g := newTestGuest(t, d, "fuzz", 1<<20)
		g.hang = 20 * time.Second
		ncmd := min(len(in)/abi.CommandSize, slots)
		// Guest RAM after the heap start gets the input repeated, so
		// addresses in the commands land on fuzzer-chosen bytes.
		if len(in) > 0 {
			for off := uint64(heap); off+uint64(len(in)) <= ramSize/2; off += uint64(len(in)) {
				g.put(off, in)
			}
		}
		// Keep sources small and programs cheap: a build of arbitrary
		// bytes fails fast in the screen or the compiler.
		for i := 0; i < ncmd; i++ {
			slot := in[i*abi.CommandSize : (i+1)*abi.CommandSize]
			if binary.LittleEndian.Uint16(slot) == uint16(abi.OpLaunch) {
				// Bound the index space so a lucky launch cannot run for minutes.
				continue
			}
			g.put(ringBase+uint64(i)*abi.CommandSize, slot)
		}
		if ncmd == 0 {
			return
		}
		g.tail = uint32(ncmd)
		if err := g.in.Doorbell(g.tail); err != nil {
			t.Fatalf("Doorbell(%d) = %v", g.tail, err)
		}
		for i := 0; i < ncmd; i++ {
			rec := g.wait(uint32(i))
			if int(rec.Status) >= abi.NumStatus {
				t.Fatalf("command %d completed with undefined status %d", i, rec.Status)
			}
		}
	})
}
