package vfiouser_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
	"github.com/vgpud/vgpud/mmio"
)

// rawPeer is a client that speaks the wire directly, for checking every
// field of every reply.
type rawPeer struct {
	t  *testing.T
	w  *vfiouser.Wire
	s  *served
	id uint16
}

func newRaw(t *testing.T) *rawPeer {
	t.Helper()
	cl, dv := socketPair(t)
	t.Cleanup(func() { cl.Close() })
	p := &rawPeer{t: t, w: vfiouser.NewWire(cl), s: serve(t, dv)}
	m := p.call(vfiouser.CmdVersion, nil, vfiouser.Version{Caps: append([]byte(vfiousertest.QEMUCaps), 0)}.Marshal())
	if m.Flags&vfiouser.FlagError != 0 {
		t.Fatalf("VERSION refused: %+v", m.Header)
	}
	return p
}

// send sends one command with flags and returns its id.
func (p *rawPeer) send(cmd vfiouser.Cmd, flags uint32, fds []int, payload []byte) uint16 {
	p.t.Helper()
	p.id++
	if err := p.w.Write(vfiouser.Header{ID: p.id, Cmd: cmd, Flags: flags}, fds, payload); err != nil {
		p.t.Fatalf("send %v: %v", cmd, err)
	}
	return p.id
}

// read reads the next reply and checks that it answers id and cmd.
func (p *rawPeer) read(id uint16, cmd vfiouser.Cmd) vfiouser.Msg {
	p.t.Helper()
	m, err := p.w.Read()
	if err != nil {
		p.t.Fatalf("%v reply: %v", cmd, err)
	}
	if m.ID != id || m.Cmd != cmd || m.Type() != vfiouser.TypeReply {
		p.t.Fatalf("reply %+v, want a reply to %v id %d", m.Header, cmd, id)
	}
	if m.Flags&vfiouser.FlagError != 0 && len(m.Payload) != 0 {
		p.t.Errorf("%v: an error reply with %d payload bytes (the specification: header only)", cmd, len(m.Payload))
	}
	m.Payload = append([]byte(nil), m.Payload...)
	return m
}

func (p *rawPeer) call(cmd vfiouser.Cmd, fds []int, payload []byte) vfiouser.Msg {
	p.t.Helper()
	return p.read(p.send(cmd, 0, fds, payload), cmd)
}

// ok calls and fails the test on an error reply.
func (p *rawPeer) ok(cmd vfiouser.Cmd, fds []int, payload []byte) vfiouser.Msg {
	p.t.Helper()
	m := p.call(cmd, fds, payload)
	if m.Flags&vfiouser.FlagError != 0 {
		p.t.Fatalf("%v: error reply %v", cmd, unix.Errno(m.Error))
	}
	return m
}

// refused calls and wants an error reply with errno want.
func (p *rawPeer) refused(what string, cmd vfiouser.Cmd, fds []int, payload []byte, want unix.Errno) {
	p.t.Helper()
	m := p.call(cmd, fds, payload)
	if m.Flags&vfiouser.FlagError == 0 || unix.Errno(m.Error) != want {
		p.t.Errorf("%s: reply %+v, want error %v", what, m.Header, want)
	}
}

func TestVersionReply(t *testing.T) {
	cl, dv := socketPair(t)
	defer cl.Close()
	serve(t, dv)
	w := vfiouser.NewWire(cl)
	req := vfiouser.Version{Caps: append([]byte(vfiousertest.QEMUCaps), 0)}.Marshal()
	if err := w.Write(vfiouser.Header{ID: 0xabcd, Cmd: vfiouser.CmdVersion}, nil, req); err != nil {
		t.Fatal(err)
	}
	m, err := w.Read()
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 0xabcd || m.Cmd != vfiouser.CmdVersion || m.Flags != vfiouser.TypeReply || m.Error != 0 {
		t.Fatalf("reply header %+v", m.Header)
	}
	// QEMU reads the reply into the buffer of its request.
	if len(m.Payload) > len(req) {
		t.Errorf("VERSION reply payload %d bytes, QEMU's request (its receive buffer) %d", len(m.Payload), len(req))
	}
	v, err := vfiouser.UnmarshalVersion(m.Payload)
	if err != nil || v.Major != 0 || v.Minor != 0 {
		t.Fatalf("version %+v, %v; want 0.0", v, err)
	}
	caps, err := vfiousertest.ParseCaps(v.Caps)
	if err != nil {
		t.Fatal(err)
	}
	want := vfiousertest.Caps{MaxMsgFDs: vfiouser.MaxFDs, MaxDataXfer: vfiouser.MaxDataXfer, PageSizes: vfiouser.PageSize, MaxDMAMaps: vfiouser.MaxDMAMaps}
	if caps != want {
		t.Errorf("capabilities %+v, want %+v (no write_multiple, no migration)", caps, want)
	}
}

// TestEveryCommand sends each command the server implements and checks
// every field of the reply, and the refusals of each.
func TestEveryCommand(t *testing.T) {
	p := newRaw(t)

	t.Run("DEVICE_GET_INFO", func(t *testing.T) {
		m := p.ok(vfiouser.CmdDeviceGetInfo, nil, vfiouser.Info{Argsz: vfiouser.InfoSize}.Marshal())
		got, err := vfiouser.UnmarshalInfo(m.Cmd, m.Payload)
		want := vfiouser.Info{Argsz: 16, Flags: vfiouser.DeviceFlagReset | vfiouser.DeviceFlagPCI, Index: vfiouser.NumRegions, Count: vfiouser.NumIRQs}
		if err != nil || got != want {
			t.Errorf("info %+v, %v; want %+v", got, err, want)
		}
		p.refused("argsz 8", vfiouser.CmdDeviceGetInfo, nil, vfiouser.Info{Argsz: 8}.Marshal(), unix.EINVAL)
		p.refused("short", vfiouser.CmdDeviceGetInfo, nil, make([]byte, 8), unix.EINVAL)
	})

	t.Run("DEVICE_GET_REGION_INFO", func(t *testing.T) {
		for idx := uint32(0); idx < vfiouser.NumRegions; idx++ {
			m := p.ok(vfiouser.CmdDeviceGetRegion, nil, vfiouser.RegionInfo{Argsz: vfiouser.RegionInfoSize, Index: idx}.Marshal())
			got, err := vfiouser.UnmarshalRegionInfo(m.Payload)
			want := vfiouser.RegionInfo{Argsz: 32, Index: idx}
			switch idx {
			case vfiouser.RegionBAR0:
				want.Flags, want.Size = vfiouser.RegionFlagRead|vfiouser.RegionFlagWrite, abi.BAR0Size
			case vfiouser.RegionConfig:
				want.Flags, want.Size = vfiouser.RegionFlagRead|vfiouser.RegionFlagWrite, mmio.ConfigSize
			}
			if err != nil || got != want || len(m.FDs) != 0 {
				t.Errorf("region %d: %+v (%d fds), %v; want %+v", idx, got, len(m.FDs), err, want)
			}
		}
		p.refused("index 9", vfiouser.CmdDeviceGetRegion, nil, vfiouser.RegionInfo{Argsz: 32, Index: 9}.Marshal(), unix.EINVAL)
		p.refused("argsz 16", vfiouser.CmdDeviceGetRegion, nil, vfiouser.RegionInfo{Argsz: 16}.Marshal(), unix.EINVAL)
	})

	t.Run("DEVICE_GET_REGION_IO_FDS", func(t *testing.T) {
		// Too small for the array: the size needed, no sub-region, no fd.
		m := p.ok(vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: vfiouser.RegionIOFDsSize}.Marshal())
		got, err := vfiouser.UnmarshalRegionIOFDs(m.Payload)
		if err != nil || got.Argsz != vfiouser.RegionIOFDsSize+vfiouser.IOFDSize || got.Count != 1 || len(got.Subs) != 0 || len(m.FDs) != 0 {
			t.Errorf("small argsz: %+v, %d fds, %v", got, len(m.FDs), err)
		}
		m = p.ok(vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: 1024}.Marshal())
		got, err = vfiouser.UnmarshalRegionIOFDs(m.Payload)
		wantSub := vfiouser.IOFD{Offset: abi.RegRingKick, Size: 4, FDIndex: 0, Type: vfiouser.IOFDTypeIoeventfd}
		if err != nil || got.Count != 1 || len(got.Subs) != 1 || got.Subs[0] != wantSub || len(m.FDs) != 1 {
			t.Errorf("BAR0: %+v, %d fds, %v; want one ioeventfd %+v", got, len(m.FDs), err, wantSub)
		}
		closeAll(m.FDs)
		m = p.ok(vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: 1024, Index: vfiouser.RegionConfig}.Marshal())
		if got, err := vfiouser.UnmarshalRegionIOFDs(m.Payload); err != nil || got.Count != 0 || len(m.FDs) != 0 {
			t.Errorf("config: %+v, %d fds, %v; want none", got, len(m.FDs), err)
		}
		p.refused("flags", vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: 1024, Flags: 1}.Marshal(), unix.EINVAL)
		p.refused("index 9", vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: 1024, Index: 9}.Marshal(), unix.EINVAL)
	})

	t.Run("DEVICE_GET_IRQ_INFO", func(t *testing.T) {
		for idx := uint32(0); idx < vfiouser.NumIRQs; idx++ {
			m := p.ok(vfiouser.CmdDeviceGetIRQInfo, nil, vfiouser.Info{Argsz: 16, Index: idx}.Marshal())
			got, err := vfiouser.UnmarshalInfo(m.Cmd, m.Payload)
			want := vfiouser.Info{Argsz: 16, Index: idx}
			switch idx {
			case vfiouser.IRQIntx:
				want.Flags, want.Count = vfiouser.IRQInfoEventfd|vfiouser.IRQInfoMaskable|vfiouser.IRQInfoAutomasked, 1
			case vfiouser.IRQErr:
				// One, or QEMU warns "Could not enable error
				// recovery for the device" (hw/vfio/pci.c).
				want.Flags, want.Count = vfiouser.IRQInfoEventfd, 1
			}
			if err != nil || got != want {
				t.Errorf("irq %d: %+v, %v; want %+v", idx, got, err, want)
			}
		}
		p.refused("index 5", vfiouser.CmdDeviceGetIRQInfo, nil, vfiouser.Info{Argsz: 16, Index: 5}.Marshal(), unix.EINVAL)
	})

	t.Run("DEVICE_SET_IRQS", func(t *testing.T) {
		set := func(flags, index, start, count uint32, data []byte) []byte {
			return vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize + uint32(len(data)), Flags: flags, Index: index, Start: start, Count: count, Data: data}.Marshal()
		}
		trig := uint32(vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger)
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		p.ok(vfiouser.CmdDeviceSetIRQs, []int{fd}, set(trig, vfiouser.IRQIntx, 0, 1, nil))
		// DATA_BOOL trigger of the one interrupt: the client raises it.
		p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataBool|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, []byte{1}))
		if n := waitCounter(t, fd, 1); n != 1 {
			t.Errorf("DATA_BOOL trigger signalled %d times, want 1", n)
		}
		p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataBool|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, []byte{0}))
		p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, nil))
		if n := waitCounter(t, fd, 1); n != 1 {
			t.Errorf("DATA_NONE trigger signalled %d times, want 1 (DATA_BOOL false: none)", n)
		}
		// MSI, MSI-X, REQ have no interrupts: only "disable all"; ERR
		// takes an eventfd (below), nothing else.
		for idx := uint32(1); idx < vfiouser.NumIRQs; idx++ {
			p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, idx, 0, 0, nil))
			p.refused("trigger on an empty index", vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, idx, 0, 1, nil), unix.EINVAL)
		}
		// ERR: QEMU's error notifier registers an eventfd and
		// de-assigns it with none (vfio_register_err_notifier).
		errFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(errFD)
		var pipe [2]int
		if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer closeAll(pipe[:])
		for _, tt := range []struct {
			name  string
			fds   []int
			flags uint32
			start uint32
			count uint32
			ok    bool
		}{
			{"eventfd", []int{errFD}, trig, 0, 1, true},
			{"eventfd again (replaces it)", []int{errFD}, trig, 0, 1, true},
			{"de-assign", nil, trig, 0, 1, true},
			{"disable all", nil, vfiouser.IRQSetDataNone | vfiouser.IRQSetActionTrigger, 0, 0, true},
			{"a pipe", []int{pipe[1]}, trig, 0, 1, false},
			{"two eventfds", []int{errFD, errFD}, trig, 0, 1, false},
			{"start 1", []int{errFD}, trig, 1, 1, false},
			{"count 2", []int{errFD}, trig, 0, 2, false},
			{"raised by the client", nil, vfiouser.IRQSetDataNone | vfiouser.IRQSetActionTrigger, 0, 1, false},
			{"unmask eventfd", []int{errFD}, vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionUnmask, 0, 1, false},
		} {
			msg := set(tt.flags, vfiouser.IRQErr, tt.start, tt.count, nil)
			if tt.ok {
				p.ok(vfiouser.CmdDeviceSetIRQs, tt.fds, msg)
			} else {
				p.refused("ERR "+tt.name, vfiouser.CmdDeviceSetIRQs, tt.fds, msg, unix.EINVAL)
			}
		}
		p.ok(vfiouser.CmdDeviceSetIRQs, []int{errFD}, set(trig, vfiouser.IRQErr, 0, 1, nil)) // left for the session's end to close
		p.refused("start 1", vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 1, 1, nil), unix.EINVAL)
		p.refused("no data flag", vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, nil), unix.EINVAL)
		p.refused("bool without data", vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataBool|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, nil), unix.EINVAL)
		p.refused("mask eventfd", vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataEventfd|vfiouser.IRQSetActionMask, vfiouser.IRQIntx, 0, 1, nil), unix.EINVAL)
		p.refused("unknown flag", vfiouser.CmdDeviceSetIRQs, nil, set(1<<6|vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, nil), unix.EINVAL)
		// Disable all: the trigger eventfd is released.
		p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 0, nil))
		p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionTrigger, vfiouser.IRQIntx, 0, 1, nil))
		if n := readCounter(t, fd); n != 0 {
			t.Errorf("a disabled INTx signalled %d times", n)
		}
	})

	t.Run("REGION_READ/WRITE", func(t *testing.T) {
		access := func(region uint32, off uint64, count uint32, data []byte) vfiouser.RegionAccess {
			t.Helper()
			cmd, payload := vfiouser.CmdRegionRead, vfiouser.RegionAccess{Offset: off, Region: region, Count: count}.Marshal()
			if data != nil {
				cmd, payload = vfiouser.CmdRegionWrite, vfiouser.RegionAccess{Offset: off, Region: region, Count: count, Data: data}.Marshal()
			}
			m := p.ok(cmd, nil, payload)
			got, err := vfiouser.UnmarshalRegionAccess(cmd, m.Payload)
			wantData := int(count)
			if data != nil {
				wantData = 0
			}
			if err != nil || got.Offset != off || got.Region != region || got.Count != count || len(got.Data) != wantData {
				t.Fatalf("%v %d+%#x/%d reply %+v, %v", cmd, region, off, count, got, err)
			}
			return got
		}
		access(vfiouser.RegionBAR0, abi.RegRingBaseLo, 4, []byte{0x40, 0x10, 0, 0})
		if got := access(vfiouser.RegionBAR0, abi.RegRingBaseLo, 4, nil); string(got.Data) != "\x40\x10\x00\x00" {
			t.Errorf("BAR0 read back %x", got.Data)
		}
		// The register file answers 4-byte accesses; others are its to
		// refuse (RegError), not the transport's.
		for _, n := range []uint32{1, 2, 8} {
			access(vfiouser.RegionBAR0, abi.RegRingBaseLo, n, nil)
		}
		if st := abi.Status(p.s.regs.ReadBAR(abi.RegError, 4)); st != abi.StatusBadAccess {
			t.Errorf("RegError after 1/2/8-byte reads = %v, want %v", st, abi.StatusBadAccess)
		}
		if got := access(vfiouser.RegionConfig, uint64(mmio.CfgVendorID), 2, nil); int(got.Data[0])|int(got.Data[1])<<8 != abi.VendorID {
			t.Errorf("vendor %x", got.Data)
		}
		access(vfiouser.RegionConfig, uint64(mmio.CfgCommand), 2, []byte{byte(mmio.CmdMemorySpace), 0})
		// A whole config space at once, as QEMU reads it at realize.
		whole := access(vfiouser.RegionConfig, 0, mmio.ConfigSize, nil)
		for off := uint32(0); off < mmio.ConfigSize; off += 4 {
			if want := p.s.cfg.Read(off, 4); le32(whole.Data[off:]) != want {
				t.Errorf("config dword %#x = %#x in the bulk read, %#x alone", off, le32(whole.Data[off:]), want)
			}
		}
		p.refused("past BAR0", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Offset: abi.BAR0Size - 2, Count: 4}.Marshal(), unix.EINVAL)
		p.refused("past config", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Region: vfiouser.RegionConfig, Offset: mmio.ConfigSize, Count: 4}.Marshal(), unix.EINVAL)
		p.refused("offset wraps", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Offset: ^uint64(0) - 1, Count: 4}.Marshal(), unix.EINVAL)
		p.refused("count 0", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Count: 0}.Marshal(), unix.EINVAL)
		p.refused("count 3", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Count: 3}.Marshal(), unix.EINVAL)
		p.refused("BAR2", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Region: 2, Count: 4}.Marshal(), unix.EINVAL)
		p.refused("read with data", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Count: 4, Data: make([]byte, 4)}.Marshal(), unix.EINVAL)
		p.refused("write count > data", vfiouser.CmdRegionWrite, nil, vfiouser.RegionAccess{Count: 4, Data: make([]byte, 2)}.Marshal(), unix.EINVAL)
		p.refused("over max_data_xfer_size", vfiouser.CmdRegionRead, nil, vfiouser.RegionAccess{Region: vfiouser.RegionConfig, Count: vfiouser.MaxDataXfer + 4}.Marshal(), unix.EINVAL)
	})

	t.Run("DEVICE_RESET", func(t *testing.T) {
		p.s.regs.WriteBAR(abi.RegIntEnable, 4, abi.IntCompletion)
		p.s.cfg.Write(mmio.CfgCommand, 2, mmio.CmdMemorySpace|mmio.CmdBusMaster)
		if m := p.ok(vfiouser.CmdDeviceReset, nil, nil); len(m.Payload) != 0 {
			t.Errorf("reset reply payload %d bytes", len(m.Payload))
		}
		if v := p.s.regs.ReadBAR(abi.RegIntEnable, 4); v != 0 {
			t.Errorf("RegIntEnable after reset = %#x", v)
		}
		if v := p.s.cfg.Read(mmio.CfgCommand, 2); v != 0 {
			t.Errorf("command register after reset = %#x", v)
		}
		p.refused("with a payload", vfiouser.CmdDeviceReset, nil, make([]byte, 4), unix.EINVAL)
	})

	t.Run("unknown and server-to-client commands", func(t *testing.T) {
		for _, c := range []vfiouser.Cmd{0, 14, vfiouser.CmdDMARead, vfiouser.CmdDMAWrite, vfiouser.CmdRegionWriteMulti,
			vfiouser.CmdDeviceFeature, vfiouser.CmdMigDataRead, vfiouser.CmdMigDataWrite, 0xffff} {
			p.refused(c.String(), c, nil, nil, unix.ENOSYS)
		}
	})
}

// TestDMAMapUnmap: the windows the device gets, read-only and fd-less
// windows, exact unmaps and VFIO_DMA_UNMAP_FLAG_ALL.
func TestDMAMapUnmap(t *testing.T) {
	p := newRaw(t)
	fd, err := newSealedFD(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	updates := func() []int {
		p.s.mem.mu.Lock()
		defer p.s.mem.mu.Unlock()
		return append([]int(nil), p.s.mem.updates...)
	}
	dmaMap := func(flags uint32, addr, size, off uint64) []byte {
		return vfiouser.DMAMap{Argsz: 32, Flags: flags, Offset: off, Addr: addr, Size: size}.Marshal()
	}
	rw := uint32(vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite)
	p.ok(vfiouser.CmdDMAMap, []int{fd}, dmaMap(rw, 0, 1<<20, 0))
	p.ok(vfiouser.CmdDMAMap, []int{fd}, dmaMap(rw, 4<<20, 4<<20, 4<<20))
	if u := updates(); len(u) != 2 || u[1] != 2 {
		t.Fatalf("device map updates %v, want [1 2]", u)
	}
	// A ROM window (read-only, as QEMU maps PAM shadows and ROMs) and a
	// window without an fd: recorded, not given to the device.
	p.ok(vfiouser.CmdDMAMap, []int{fd}, dmaMap(vfiouser.DMAFlagRead, 2<<20, 1<<20, 2<<20))
	p.ok(vfiouser.CmdDMAMap, nil, dmaMap(rw, 1<<32, 1<<20, 0))
	if u := updates(); len(u) != 2 {
		t.Errorf("a read-only or fd-less window updated the device map: %v", u)
	}
	p.refused("overlap", vfiouser.CmdDMAMap, []int{fd}, dmaMap(rw, 2<<20+4096, 4096, 0), unix.EEXIST)
	p.refused("unaligned", vfiouser.CmdDMAMap, nil, dmaMap(rw, 64<<20+1, 4096, 0), unix.EINVAL)
	p.refused("empty", vfiouser.CmdDMAMap, nil, dmaMap(rw, 64<<20, 0, 0), unix.EINVAL)
	p.refused("past the file", vfiouser.CmdDMAMap, []int{fd}, dmaMap(rw, 64<<20, 1<<20, 8<<20), unix.EINVAL)
	p.refused("unknown flag", vfiouser.CmdDMAMap, nil, dmaMap(rw|4, 64<<20, 4096, 0), unix.EINVAL)
	if u := updates(); u[len(u)-1] != 2 {
		t.Errorf("after the refusals the device map has %d windows, want 2", u[len(u)-1])
	}

	unmap := func(flags uint32, addr, size uint64) []byte {
		return vfiouser.DMAUnmap{Argsz: 24, Flags: flags, Addr: addr, Size: size}.Marshal()
	}
	p.refused("part of a window", vfiouser.CmdDMAUnmap, nil, unmap(0, 0, 4096), unix.EINVAL)
	p.refused("unknown window", vfiouser.CmdDMAUnmap, nil, unmap(0, 16<<20, 4096), unix.EINVAL)
	p.refused("dirty bitmap", vfiouser.CmdDMAUnmap, nil, unmap(1, 0, 1<<20), unix.EINVAL)
	p.refused("all with a range", vfiouser.CmdDMAUnmap, nil, unmap(vfiouser.DMAUnmapFlagAll, 0, 1<<20), unix.EINVAL)
	req := unmap(0, 0, 1<<20)
	if m := p.ok(vfiouser.CmdDMAUnmap, nil, req); string(m.Payload) != string(req) {
		t.Errorf("unmap reply %x, want the request's entry %x", m.Payload, req)
	}
	if u := updates(); u[len(u)-1] != 1 {
		t.Errorf("after the unmap the device map has %d windows, want 1", u[len(u)-1])
	}
	p.ok(vfiouser.CmdDMAUnmap, nil, unmap(0, 2<<20, 1<<20)) // the read-only one
	p.ok(vfiouser.CmdDMAUnmap, nil, unmap(vfiouser.DMAUnmapFlagAll, 0, 0))
	if u := updates(); u[len(u)-1] != 0 {
		t.Errorf("after unmap-all the device map has %d windows, want 0", u[len(u)-1])
	}
	p.refused("the fd-less window after unmap-all", vfiouser.CmdDMAUnmap, nil, unmap(0, 1<<32, 1<<20), unix.EINVAL)
}

// TestPostedWrites: QEMU posts BAR writes (No_reply). None is answered,
// a refused one neither, and a read after them sees them: the server
// handles messages in order.
func TestPostedWrites(t *testing.T) {
	p := newRaw(t)
	write := func(off uint64, v byte) []byte {
		return vfiouser.RegionAccess{Offset: off, Count: 4, Data: []byte{v, 0, 0, 0}}.Marshal()
	}
	p.send(vfiouser.CmdRegionWrite, vfiouser.FlagNoReply, nil, write(abi.RegRingSlots, 0x40))
	p.send(vfiouser.CmdRegionWrite, vfiouser.FlagNoReply, nil, write(abi.BAR0Size, 1)) // refused, silently
	p.send(vfiouser.CmdDeviceGetInfo, vfiouser.FlagNoReply, nil, vfiouser.Info{Argsz: 16}.Marshal())
	id := p.send(vfiouser.CmdRegionRead, 0, nil, vfiouser.RegionAccess{Offset: abi.RegRingSlots, Count: 4}.Marshal())
	m := p.read(id, vfiouser.CmdRegionRead)
	if got, err := vfiouser.UnmarshalRegionAccess(m.Cmd, m.Payload); err != nil || le32(got.Data) != 0x40 {
		t.Errorf("read after posted writes: %+v %v", got, err)
	}
}

// TestTriggerSwapKeepsMask: QEMU's KVM path masks INTx, swaps in the
// irqfd and unmasks; the swap must not unmask (VFIO keeps the mask).
func TestTriggerSwapKeepsMask(t *testing.T) {
	p := newRaw(t)
	efd := func() int {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	set := func(flags uint32) []byte {
		return vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: flags, Index: vfiouser.IRQIntx, Count: 1}.Marshal()
	}
	first, second := efd(), efd()
	p.ok(vfiouser.CmdDeviceSetIRQs, []int{first}, set(vfiouser.IRQSetDataEventfd|vfiouser.IRQSetActionTrigger))
	p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionMask))
	p.s.regs.WriteBAR(abi.RegIntEnable, 4, abi.IntCompletion)
	p.s.regs.INTx().Signal(abi.IntCompletion) // the line rises while masked
	p.ok(vfiouser.CmdDeviceSetIRQs, []int{second}, set(vfiouser.IRQSetDataEventfd|vfiouser.IRQSetActionTrigger))
	if n := readCounter(t, first) + readCounter(t, second); n != 0 {
		t.Errorf("%d interrupts while masked", n)
	}
	p.ok(vfiouser.CmdDeviceSetIRQs, nil, set(vfiouser.IRQSetDataNone|vfiouser.IRQSetActionUnmask))
	if n := waitCounter(t, second, 1); n != 1 {
		t.Errorf("unmask with the line high: %d interrupts on the new eventfd, want 1", n)
	}
}

// TestRegisterAccessAllocs: a register read or write round trip
// allocates nothing, on either side.
func TestRegisterAccessAllocs(t *testing.T) {
	c, _ := attach(t)
	for _, posted := range []bool{false, true} {
		c.Posted = posted
		if n := testing.AllocsPerRun(200, func() {
			c.Write32(abi.RegRingSlots, 0x40)
			_ = c.Read32(abi.RegRingSlots)
		}); n != 0 {
			t.Errorf("posted=%v: %.1f allocations per write and read", posted, n)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseWhileServing: Close from another goroutine ends Serve with
// ErrClosed whatever the client was doing, and leaves no goroutine (the
// kick and unmask watchers) behind: TestMain's goleak checks.
func TestCloseWhileServing(t *testing.T) {
	c, s := attach(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c.Err() == nil {
			c.Write32(abi.RegRingSlots, 1)
		}
	}()
	s.sess.Close()
	<-done
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not end after Close")
	}
	if err := c.Err(); err == nil || errors.Is(err, vfiousertest.ErrReply) {
		t.Errorf("client error after Close = %v, want a transport error", err)
	}
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func readCounter(t *testing.T, fd int) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return 0
		}
		t.Fatal(err)
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

// waitCounter waits until an interrupt eventfd's counter has added up to
// at least n (the session writes it from a goroutine of its own, after
// the request's reply) and returns the sum.
func waitCounter(t *testing.T, fd int, n uint64) uint64 {
	t.Helper()
	var got uint64
	for got < n {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, err := unix.Poll(pfd, int(time.Minute/time.Millisecond)); errors.Is(err, unix.EINTR) {
			continue
		} else if err != nil || k == 0 {
			t.Fatalf("poll eventfd after %d of %d signals: %d, %v", got, n, k, err)
		}
		got += readCounter(t, fd)
	}
	return got
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func newSealedFD(size int64) (int, error) {
	fd, err := unix.MemfdCreate("commands-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
