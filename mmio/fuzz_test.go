package mmio

import (
	"encoding/binary"
	"testing"
)

// FuzzRegisterAccess replays random sequences of config-space and BAR
// accesses: none may panic, and the config space keeps its identity.
// Each access is 10 bytes: kind, size, offset (u32), value (u32).
func FuzzRegisterAccess(f *testing.F) {
	f.Add([]byte{0, 4, 0x10, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 4, 0x10, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 4, 0x54, 0, 0, 0, 1, 0, 0, 0, 3, 4, 0x58, 0, 0, 0, 5, 0, 0, 0, 2, 4, 0x5c, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 3, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		b := &fakeBackend{limits: Limits{ProfileName: "p", DeviceName: "d"}}
		d := New(b)
		c := NewConfigSpace()
		for len(ops) >= 10 {
			kind, size := ops[0], int(int8(ops[1]))
			off := binary.LittleEndian.Uint32(ops[2:])
			v := binary.LittleEndian.Uint32(ops[6:])
			ops = ops[10:]
			switch kind % 5 {
			case 0:
				c.Write(off, size, v)
			case 1:
				c.Read(off, size)
			case 2:
				d.ReadBAR(uint64(off)|uint64(v)<<32, size)
			case 3:
				d.WriteBAR(uint64(off), size, uint64(v))
			case 4:
				d.Reset()
			}
		}
		if got := c.Read(0, 4); got != 0x00017667 {
			t.Fatalf("Read(0, 4) = %#x, want identity 0x00017667", got)
		}
	})
}
