package vfiouser_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// withArgsz returns payload with its argsz (the first 4 bytes) set to a.
func withArgsz(payload []byte, a uint32) []byte {
	b := append([]byte(nil), payload...)
	b[0], b[1], b[2], b[3] = byte(a), byte(a>>8), byte(a>>16), byte(a>>24)
	return b
}

// TestArgsz (issue 40, item 8): every request with an argsz is held to
// the specification. Where argsz is the size of the request itself
// (DMA_MAP, DEVICE_SET_IRQS) it must equal the payload's size; where it
// is the largest reply the client takes (DMA_UNMAP, DEVICE_GET_INFO,
// DEVICE_GET_REGION_INFO, DEVICE_GET_REGION_IO_FDS, DEVICE_GET_IRQ_INFO)
// it must hold the fixed reply structure, may exceed the request (QEMU
// asks for region information with room for capabilities), and no reply
// is longer than it. Anything else is refused with EINVAL, and the
// session goes on.
func TestArgsz(t *testing.T) {
	p := newRaw(t)
	fd, err := newSealedFD(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	rw := uint32(vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite)
	dmaMap := vfiouser.DMAMap{Argsz: 32, Flags: rw, Addr: 1 << 20, Size: 1 << 20}.Marshal()
	dmaUnmap := vfiouser.DMAUnmap{Argsz: 24, Addr: 1 << 20, Size: 1 << 20}.Marshal()
	getInfo := vfiouser.Info{Argsz: 16}.Marshal()
	regionInfo := vfiouser.RegionInfo{Argsz: 32, Index: vfiouser.RegionBAR0}.Marshal()
	ioFDs := vfiouser.RegionIOFDs{Argsz: 16, Index: vfiouser.RegionConfig}.Marshal()
	irqInfo := vfiouser.Info{Argsz: 16, Index: vfiouser.IRQIntx}.Marshal()
	setNone := vfiouser.IRQSet{Argsz: 20, Flags: vfiouser.IRQSetDataNone | vfiouser.IRQSetActionUnmask, Index: vfiouser.IRQIntx, Count: 1}.Marshal()
	setBool := vfiouser.IRQSet{Argsz: 21, Flags: vfiouser.IRQSetDataBool | vfiouser.IRQSetActionUnmask, Index: vfiouser.IRQIntx, Count: 1, Data: []byte{1}}.Marshal()
	setFD := vfiouser.IRQSet{Argsz: 20, Flags: vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger, Index: vfiouser.IRQIntx, Count: 1}.Marshal()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)

	for _, c := range []struct {
		name    string
		cmd     vfiouser.Cmd
		payload []byte
		argsz   uint32
		fds     []int
		ok      bool
	}{
		// argsz is the request's size: exactly the payload.
		{"DMA_MAP argsz 8", vfiouser.CmdDMAMap, dmaMap, 8, []int{fd}, false},
		{"DMA_MAP argsz 0", vfiouser.CmdDMAMap, dmaMap, 0, nil, false},
		{"DMA_MAP argsz 31", vfiouser.CmdDMAMap, dmaMap, 31, nil, false},
		{"DMA_MAP argsz past the message", vfiouser.CmdDMAMap, dmaMap, 33, nil, false},
		{"DMA_MAP argsz huge", vfiouser.CmdDMAMap, dmaMap, 1 << 31, nil, false},
		{"DMA_MAP argsz 32", vfiouser.CmdDMAMap, dmaMap, 32, []int{fd}, true},
		{"DEVICE_SET_IRQS argsz 8", vfiouser.CmdDeviceSetIRQs, setNone, 8, nil, false},
		{"DEVICE_SET_IRQS argsz 19", vfiouser.CmdDeviceSetIRQs, setNone, 19, nil, false},
		{"DEVICE_SET_IRQS argsz past the message", vfiouser.CmdDeviceSetIRQs, setNone, 24, nil, false},
		{"DEVICE_SET_IRQS bool argsz without its data", vfiouser.CmdDeviceSetIRQs, setBool, 20, nil, false},
		{"DEVICE_SET_IRQS eventfd argsz 8", vfiouser.CmdDeviceSetIRQs, setFD, 8, []int{efd}, false},
		{"DEVICE_SET_IRQS argsz 20", vfiouser.CmdDeviceSetIRQs, setNone, 20, nil, true},
		{"DEVICE_SET_IRQS bool argsz 21", vfiouser.CmdDeviceSetIRQs, setBool, 21, nil, true},
		{"DEVICE_SET_IRQS eventfd argsz 20", vfiouser.CmdDeviceSetIRQs, setFD, 20, []int{efd}, true},
		// argsz bounds the reply: at least its fixed structure.
		{"DMA_UNMAP argsz 8", vfiouser.CmdDMAUnmap, dmaUnmap, 8, nil, false},
		{"DMA_UNMAP argsz 23", vfiouser.CmdDMAUnmap, dmaUnmap, 23, nil, false},
		{"DEVICE_GET_INFO argsz 0", vfiouser.CmdDeviceGetInfo, getInfo, 0, nil, false},
		{"DEVICE_GET_INFO argsz 15", vfiouser.CmdDeviceGetInfo, getInfo, 15, nil, false},
		{"DEVICE_GET_INFO argsz 16", vfiouser.CmdDeviceGetInfo, getInfo, 16, nil, true},
		{"DEVICE_GET_INFO argsz 4096", vfiouser.CmdDeviceGetInfo, getInfo, 4096, nil, true},
		{"DEVICE_GET_REGION_INFO argsz 31", vfiouser.CmdDeviceGetRegion, regionInfo, 31, nil, false},
		{"DEVICE_GET_REGION_INFO argsz 32", vfiouser.CmdDeviceGetRegion, regionInfo, 32, nil, true},
		{"DEVICE_GET_REGION_INFO argsz 4096 (room for capabilities)", vfiouser.CmdDeviceGetRegion, regionInfo, 4096, nil, true},
		{"DEVICE_GET_REGION_IO_FDS argsz 0", vfiouser.CmdDeviceGetRegionIO, ioFDs, 0, nil, false},
		{"DEVICE_GET_REGION_IO_FDS argsz 15", vfiouser.CmdDeviceGetRegionIO, ioFDs, 15, nil, false},
		{"DEVICE_GET_REGION_IO_FDS argsz 16", vfiouser.CmdDeviceGetRegionIO, ioFDs, 16, nil, true},
		{"DEVICE_GET_IRQ_INFO argsz 8", vfiouser.CmdDeviceGetIRQInfo, irqInfo, 8, nil, false},
		{"DEVICE_GET_IRQ_INFO argsz 16", vfiouser.CmdDeviceGetIRQInfo, irqInfo, 16, nil, true},
		{"DEVICE_GET_IRQ_INFO argsz 1024", vfiouser.CmdDeviceGetIRQInfo, irqInfo, 1024, nil, true},
		// After the map above: the unmap, with a large argsz.
		{"DMA_UNMAP argsz 4096", vfiouser.CmdDMAUnmap, dmaUnmap, 4096, nil, true},
	} {
		payload := withArgsz(c.payload, c.argsz)
		if !c.ok {
			p.refused(c.name, c.cmd, c.fds, payload, unix.EINVAL)
			continue
		}
		m := p.call(c.cmd, c.fds, payload)
		closeAll(m.FDs)
		if m.Flags&vfiouser.FlagError != 0 {
			t.Errorf("%s: refused (%v)", c.name, unix.Errno(m.Error))
			continue
		}
		if uint64(len(m.Payload)) > uint64(c.argsz) {
			t.Errorf("%s: reply payload %d bytes, more than argsz %d", c.name, len(m.Payload), c.argsz)
		}
	}

	// DEVICE_GET_REGION_IO_FDS: with room for the header only, the size
	// needed and no array, no fd; with room, the array.
	m := p.ok(vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: 16, Index: vfiouser.RegionBAR0}.Marshal())
	if got, err := vfiouser.UnmarshalRegionIOFDs(m.Payload); err != nil || len(m.Payload) != 16 || got.Argsz != 56 || len(m.FDs) != 0 {
		t.Errorf("IO_FDS argsz 16: %+v (%d bytes, %d fds), %v; want argsz 56, no array, no fd", got, len(m.Payload), len(m.FDs), err)
	}
	closeAll(m.FDs)
	m = p.ok(vfiouser.CmdDeviceGetRegionIO, nil, vfiouser.RegionIOFDs{Argsz: 56, Index: vfiouser.RegionBAR0}.Marshal())
	if got, err := vfiouser.UnmarshalRegionIOFDs(m.Payload); err != nil || len(m.Payload) != 56 || len(got.Subs) != 1 || len(m.FDs) != 1 {
		t.Errorf("IO_FDS argsz 56: %+v (%d bytes, %d fds), %v; want the array", got, len(m.Payload), len(m.FDs), err)
	}
	closeAll(m.FDs)
}

// TestVersionCapabilities (issue 40, item 8): VERSION's version data is
// none, or a UTF-8 JSON object with its terminating NUL as the last byte,
// whose capabilities the specification defines have their types; the
// server accepts what QEMU sends and members it does not know, and ends
// the session on anything else (the specification: it closes the
// connection when it cannot take the proposal).
func TestVersionCapabilities(t *testing.T) {
	qemu := vfiousertest.QEMUCaps
	for _, c := range []struct {
		name string
		caps string
		ok   bool
	}{
		{"none", "", true},
		{"QEMU's", qemu + "\x00", true},
		{"empty object", "{}\x00", true},
		{"empty capabilities", `{"capabilities":{}}` + "\x00", true},
		{"white space", " \n{ \"capabilities\" : { \"pgsizes\" : 4096 } }\t\x00", true},
		{"unknown capability", `{"capabilities":{"future":[1,{"x":null}],"max_msg_fds":1}}` + "\x00", true},
		{"unknown member", `{"other":"x","capabilities":{}}` + "\x00", true},
		{"twin socket", `{"capabilities":{"twin_socket":{"supported":true}}}` + "\x00", true},
		{"no NUL", qemu, false},
		{"no NUL, short", "{}", false},
		{"two NULs", "{}\x00\x00", false},
		{"bytes after the NUL", "{}\x00junk", false},
		{"a second string after the NUL", "{}\x00{}\x00", false},
		{"NUL inside", "{\x00}\x00", false},
		{"only the NUL", "\x00", false},
		{"not JSON", "{not json\x00", false},
		{"trailing text", "{} x\x00", false},
		{"two objects", "{}{}\x00", false},
		{"an array", "[]\x00", false},
		{"null", "null\x00", false},
		{"a string", `"capabilities"` + "\x00", false},
		{"not UTF-8", "{\"x\":\"\xff\xfe\"}\x00", false},
		{"capabilities an array", `{"capabilities":[]}` + "\x00", false},
		{"capabilities null", `{"capabilities":null}` + "\x00", false},
		{"capabilities a number", `{"capabilities":8}` + "\x00", false},
		{"max_msg_fds a string", `{"capabilities":{"max_msg_fds":"8"}}` + "\x00", false},
		{"max_msg_fds negative", `{"capabilities":{"max_msg_fds":-1}}` + "\x00", false},
		{"max_data_xfer_size a fraction", `{"capabilities":{"max_data_xfer_size":1.5}}` + "\x00", false},
		{"max_dma_maps an exponent", `{"capabilities":{"max_dma_maps":1e3}}` + "\x00", false},
		{"pgsizes past 64 bits", `{"capabilities":{"pgsizes":18446744073709551616}}` + "\x00", false},
		{"pgsizes null", `{"capabilities":{"pgsizes":null}}` + "\x00", false},
		{"write_multiple a number", `{"capabilities":{"write_multiple":1}}` + "\x00", false},
		{"twin_socket a boolean", `{"capabilities":{"twin_socket":true}}` + "\x00", false},
		{"twin_socket.supported a string", `{"capabilities":{"twin_socket":{"supported":"yes"}}}` + "\x00", false},
		{"twin_socket.fd_index negative", `{"capabilities":{"twin_socket":{"fd_index":-1}}}` + "\x00", false},
		{"migration a number", `{"capabilities":{"migration":4096}}` + "\x00", false},
		{"migration.pgsize a string", `{"capabilities":{"migration":{"pgsize":"4k"}}}` + "\x00", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, dv := socketPair(t)
			defer cl.Close()
			s := serve(t, dv)
			w := vfiouser.NewWire(cl)
			if err := w.Write(vfiouser.Header{ID: 1, Cmd: vfiouser.CmdVersion}, nil, vfiouser.Version{Caps: []byte(c.caps)}.Marshal()); err != nil {
				t.Fatal(err)
			}
			m, err := w.Read()
			if c.ok {
				if err != nil || m.Flags != vfiouser.TypeReply {
					t.Fatalf("VERSION with %q: %+v, %v; want a reply", c.caps, m.Header, err)
				}
				// And the session serves.
				if err := w.Write(vfiouser.Header{ID: 2, Cmd: vfiouser.CmdDeviceGetInfo}, nil, vfiouser.Info{Argsz: 16}.Marshal()); err != nil {
					t.Fatal(err)
				}
				if m, err := w.Read(); err != nil || m.Flags != vfiouser.TypeReply {
					t.Fatalf("DEVICE_GET_INFO after VERSION: %+v, %v", m.Header, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("VERSION with %q answered %+v; want the session ended", c.caps, m.Header)
			}
			select {
			case err := <-s.done:
				if !errors.Is(err, vfiouser.ErrProtocol) {
					t.Errorf("Serve = %v, want a protocol violation", err)
				}
				s.done <- err
			case <-time.After(30 * time.Second):
				t.Fatal("Serve did not end")
			}
		})
	}
}
