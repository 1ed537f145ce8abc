package vfiouser_test

import (
	"io"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// FuzzSession feeds arbitrary bytes to a Session after a proper VERSION:
// whatever arrives, Serve ends (the peer hangs up after the bytes)
// without a panic, and the device is still usable by a new session.
func FuzzSession(f *testing.F) {
	hdr := func(cmd vfiouser.Cmd, payload []byte) []byte {
		b := make([]byte, vfiouser.HeaderSize)
		vfiouser.Header{ID: 3, Cmd: cmd, Size: uint32(vfiouser.HeaderSize + len(payload))}.Put(b)
		return append(b, payload...)
	}
	f.Add(hdr(vfiouser.CmdRegionWrite, vfiouser.RegionAccess{Offset: 0x58, Count: 4, Data: []byte{1, 0, 0, 0}}.Marshal()))
	f.Add(hdr(vfiouser.CmdRegionRead, vfiouser.RegionAccess{Offset: 0, Region: vfiouser.RegionConfig, Count: 256}.Marshal()))
	f.Add(hdr(vfiouser.CmdDeviceGetRegionIO, vfiouser.RegionIOFDs{Argsz: 56}.Marshal()))
	f.Add(hdr(vfiouser.CmdDeviceSetIRQs, vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize + 1, Flags: vfiouser.IRQSetDataBool | vfiouser.IRQSetActionTrigger, Count: 1, Data: []byte{1}}.Marshal()))
	f.Add(hdr(vfiouser.CmdDMAMap, vfiouser.DMAMap{Argsz: vfiouser.DMAMapSize, Flags: vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite, Addr: 1 << 20, Size: 4096}.Marshal()))
	f.Add(hdr(vfiouser.CmdDMAMap, vfiouser.DMAMap{Argsz: 8, Flags: vfiouser.DMAFlagRead, Addr: 1 << 20, Size: 4096}.Marshal()))
	f.Add(hdr(vfiouser.CmdVersion, vfiouser.Version{Caps: []byte("{}")}.Marshal()))
	f.Add(hdr(vfiouser.CmdDMAUnmap, vfiouser.DMAUnmap{Argsz: 24, Addr: 0, Size: 4096}.Marshal()))
	f.Add(hdr(vfiouser.CmdDeviceReset, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		cl, dv := socketPair(t)
		s := serve(t, dv)
		w := vfiouser.NewWire(cl)
		if err := w.Write(vfiouser.Header{ID: 1, Cmd: vfiouser.CmdVersion}, nil, vfiouser.Version{}.Marshal()); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Read(); err != nil {
			t.Fatal(err)
		}
		go func() {
			cl.Write(data)
			cl.CloseWrite()
			io.Copy(io.Discard, cl) // the replies
		}()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("Serve still running after the peer hung up on %x", data)
		}
		cl.Close()
		s.done <- nil
		// The register file still answers.
		if got := s.regs.ReadBAR(0, 4); got != 0x55504756 {
			t.Fatalf("RegID after %x = %#x", data, got)
		}
	})
}
