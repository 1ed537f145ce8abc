package vfiousertest

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// Conformance is vfio-user for the transport conformance suite; its
// guests are clients of Mode (IOEventfd by default: the kick doorbell on
// the server's ioeventfd; QEMU101: posted writes, what QEMU 10.1 sends).
type Conformance struct{ Mode Mode }

var _ transporttest.Transport = Conformance{}

func (c Conformance) Name() string {
	if c.Mode == QEMU101 {
		return "vfio-user-qemu10.1"
	}
	return "vfio-user"
}
func (Conformance) Socket() transport.Socket { return vfiouser.Transport{} }

// Attach dials the instance's vfio-user socket and sets the device up as
// QEMU's vfio-user-pci would.
func (cf Conformance) Attach(t testing.TB, inst *mdev.Instance, ram uint64) transporttest.Guest {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		t.Fatalf("dial %s: %v", inst.Socket(), err)
	}
	c, err := NewMode(conn, ram, cf.Mode)
	if err != nil {
		t.Fatalf("vfio-user attach: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hangUp is what an attack expects when the server must end the session.
const hangUp = unix.Errno(0)

// attack is one hostile peer: after VERSION unless raw, it sends msg
// (with fds made by fds) and expects an error reply with errno want, or
// the server to hang up (want == hangUp). A session that answered with
// an error reply must still serve: a DEVICE_GET_INFO follows.
type attack struct {
	name    string
	raw     bool     // skip VERSION
	pre     [][]byte // sent after VERSION, each answered without error
	msg     func() []byte
	fds     func(t testing.TB) []int
	want    unix.Errno
	halfMsg bool // close the write side after msg: the rest never comes
	// accepted: msg is answered without error (harmless, e.g. a window
	// the device never uses); silent: msg asks for no reply and must get
	// none, the refusal included.
	accepted, silent bool
}

func header(cmd vfiouser.Cmd, flags uint32, payload []byte) []byte {
	b := make([]byte, vfiouser.HeaderSize, vfiouser.HeaderSize+len(payload))
	vfiouser.Header{ID: 7, Cmd: cmd, Size: uint32(vfiouser.HeaderSize + len(payload)), Flags: flags}.Put(b)
	return append(b, payload...)
}

func eventfds(n int) func(testing.TB) []int {
	return func(t testing.TB) []int {
		var fds []int
		for range n {
			fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, fd)
		}
		return fds
	}
}

func unsealedMemfd(t testing.TB) []int {
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	return []int{fd}
}

func dmaMap(addr, size, offset uint64) []byte {
	return header(vfiouser.CmdDMAMap, 0, vfiouser.DMAMap{Argsz: vfiouser.DMAMapSize, Flags: vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite,
		Offset: offset, Addr: addr, Size: size}.Marshal())
}

func regionWrite(region uint32, off uint64, count uint32, data []byte) []byte {
	return header(vfiouser.CmdRegionWrite, 0, vfiouser.RegionAccess{Offset: off, Region: region, Count: count, Data: data}.Marshal())
}

var attacks = []attack{
	{name: "bad-type", raw: true, msg: func() []byte { return header(vfiouser.CmdVersion, 7, make([]byte, 4)) }, want: hangUp},
	{name: "size-huge", raw: true, msg: func() []byte {
		b := header(vfiouser.CmdVersion, 0, nil)
		vfiouser.Header{ID: 1, Cmd: vfiouser.CmdVersion, Size: 1 << 30}.Put(b)
		return b
	}, want: hangUp},
	{name: "size-below-header", raw: true, msg: func() []byte {
		b := header(vfiouser.CmdVersion, 0, nil)
		vfiouser.Header{ID: 1, Cmd: vfiouser.CmdVersion, Size: 3}.Put(b)
		return b
	}, want: hangUp},
	{name: "before-version", raw: true, msg: func() []byte {
		return header(vfiouser.CmdDeviceGetInfo, 0, vfiouser.Info{Argsz: 16}.Marshal())
	}, want: hangUp},
	{name: "version-major-1", raw: true, msg: func() []byte {
		return header(vfiouser.CmdVersion, 0, vfiouser.Version{Major: 1}.Marshal())
	}, want: hangUp},
	{name: "version-bad-json", raw: true, msg: func() []byte {
		return header(vfiouser.CmdVersion, 0, vfiouser.Version{Caps: []byte("{not json\x00")}.Marshal())
	}, want: hangUp},
	{name: "version-caps-without-nul", raw: true, msg: func() []byte {
		return header(vfiouser.CmdVersion, 0, vfiouser.Version{Caps: []byte(QEMUCaps)}.Marshal())
	}, want: hangUp},
	{name: "version-caps-after-nul", raw: true, msg: func() []byte {
		return header(vfiouser.CmdVersion, 0, vfiouser.Version{Caps: []byte("{}\x00{}\x00")}.Marshal())
	}, want: hangUp},
	{name: "version-caps-wrong-type", raw: true, msg: func() []byte {
		return header(vfiouser.CmdVersion, 0, vfiouser.Version{Caps: []byte(`{"capabilities":{"max_msg_fds":"8"}}` + "\x00")}.Marshal())
	}, want: hangUp},
	{name: "second-version", msg: func() []byte { return header(vfiouser.CmdVersion, 0, vfiouser.Version{}.Marshal()) }, want: hangUp},
	{name: "reply-from-client", msg: func() []byte { return header(vfiouser.CmdDeviceGetInfo, vfiouser.TypeReply, nil) }, want: hangUp},
	{name: "truncated", msg: func() []byte { return header(vfiouser.CmdRegionWrite, 0, make([]byte, 20))[:24] }, halfMsg: true, want: hangUp},
	{name: "unknown-command", msg: func() []byte { return header(99, 0, nil) }, want: unix.ENOSYS},
	{name: "dma-read-from-client", msg: func() []byte { return header(vfiouser.CmdDMARead, 0, make([]byte, 16)) }, want: unix.ENOSYS},
	{name: "dma-map-unsealed", msg: func() []byte { return dmaMap(1<<20, 1<<20, 0) }, fds: unsealedMemfd, want: unix.EINVAL},
	{name: "dma-map-unaligned", msg: func() []byte { return dmaMap(1<<20+1, 1<<20, 0) }, fds: eventfds(0), want: unix.EINVAL},
	{name: "dma-map-wraps", msg: func() []byte { return dmaMap(^uint64(0)-4095, 1<<20, 0) }, want: unix.EINVAL},
	{name: "dma-map-two-fds", msg: func() []byte { return dmaMap(1<<20, 1<<20, 0) }, fds: eventfds(2), want: unix.EINVAL},
	{name: "dma-map-argsz-8", msg: func() []byte {
		return header(vfiouser.CmdDMAMap, 0, vfiouser.DMAMap{Argsz: 8, Flags: vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite, Addr: 1 << 20, Size: 1 << 20}.Marshal())
	}, want: unix.EINVAL},
	{name: "set-irqs-argsz-past-message", msg: func() []byte {
		return header(vfiouser.CmdDeviceSetIRQs, 0, vfiouser.IRQSet{Argsz: 4096, Flags: vfiouser.IRQSetDataNone | vfiouser.IRQSetActionUnmask,
			Index: vfiouser.IRQIntx, Count: 1}.Marshal())
	}, want: unix.EINVAL},
	{name: "dma-map-short", msg: func() []byte { return header(vfiouser.CmdDMAMap, 0, make([]byte, 8)) }, want: unix.EINVAL},
	{name: "dma-unmap-unknown", msg: func() []byte {
		return header(vfiouser.CmdDMAUnmap, 0, vfiouser.DMAUnmap{Argsz: vfiouser.DMAUnmapSize, Addr: 1 << 20, Size: 4096}.Marshal())
	}, want: unix.EINVAL},
	{name: "region-write-past-bar0", msg: func() []byte { return regionWrite(vfiouser.RegionBAR0, abi.BAR0Size-2, 4, make([]byte, 4)) }, want: unix.EINVAL},
	{name: "region-count-lies", msg: func() []byte { return regionWrite(vfiouser.RegionBAR0, 0, 8, make([]byte, 4)) }, want: unix.EINVAL},
	{name: "region-rom", msg: func() []byte { return regionWrite(vfiouser.RegionROM, 0, 4, make([]byte, 4)) }, want: unix.EINVAL},
	{name: "region-index-huge", msg: func() []byte { return regionWrite(1<<31, 0, 4, make([]byte, 4)) }, want: unix.EINVAL},
	{name: "region-bar0-count-3", msg: func() []byte { return regionWrite(vfiouser.RegionBAR0, 0, 3, make([]byte, 3)) }, want: unix.EINVAL},
	{name: "set-irqs-three-fds", msg: func() []byte {
		return header(vfiouser.CmdDeviceSetIRQs, 0, vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger,
			Index: vfiouser.IRQIntx, Count: 1}.Marshal())
	}, fds: eventfds(3), want: unix.EINVAL},
	{name: "set-irqs-msi", msg: func() []byte {
		return header(vfiouser.CmdDeviceSetIRQs, 0, vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: vfiouser.IRQSetDataEventfd | vfiouser.IRQSetActionTrigger,
			Index: vfiouser.IRQMSI, Count: 1}.Marshal())
	}, fds: eventfds(1), want: unix.EINVAL},
	{name: "set-irqs-two-actions", msg: func() []byte {
		return header(vfiouser.CmdDeviceSetIRQs, 0, vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize,
			Flags: vfiouser.IRQSetDataNone | vfiouser.IRQSetActionMask | vfiouser.IRQSetActionUnmask, Index: vfiouser.IRQIntx, Count: 1}.Marshal())
	}, want: unix.EINVAL},
	{name: "fd-on-get-info", msg: func() []byte { return header(vfiouser.CmdDeviceGetInfo, 0, vfiouser.Info{Argsz: 16}.Marshal()) }, fds: eventfds(1), want: unix.EINVAL},
	{name: "nine-fds", msg: func() []byte { return dmaMap(1<<20, 1<<20, 0) }, fds: eventfds(9), want: hangUp},
	{name: "dma-map-overlapping", pre: [][]byte{dmaMap(1<<20, 1<<20, 0)}, msg: func() []byte { return dmaMap(1<<20+1<<19, 1<<20, 0) }, want: unix.EEXIST},
	{name: "dma-map-without-fd", msg: func() []byte { return dmaMap(1<<20, 1<<20, 0) }, accepted: true},
	{name: "set-irqs-fd-with-data-none", msg: func() []byte {
		return header(vfiouser.CmdDeviceSetIRQs, 0, vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: vfiouser.IRQSetDataNone | vfiouser.IRQSetActionTrigger,
			Index: vfiouser.IRQIntx, Count: 1}.Marshal())
	}, fds: eventfds(1), want: unix.EINVAL},
	{name: "posted-write-past-bar0", msg: func() []byte {
		b := regionWrite(vfiouser.RegionBAR0, abi.BAR0Size, 4, make([]byte, 4))
		vfiouser.Header{ID: 7, Cmd: vfiouser.CmdRegionWrite, Size: uint32(len(b)), Flags: vfiouser.FlagNoReply}.Put(b)
		return b
	}, silent: true},
}

// Hostile lists the attacks.
// The attacks speak raw messages, not through the client, so they do not
// depend on its mode: they run once, with the default mode.
func (c Conformance) Hostile() []transporttest.Attack {
	if c.Mode != IOEventfd {
		return nil
	}
	out := make([]transporttest.Attack, len(attacks))
	for i, a := range attacks {
		out[i] = transporttest.Attack{Name: a.name, Run: a.run}
	}
	return out
}

func (a attack) run(t testing.TB, inst *mdev.Instance) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	w := vfiouser.NewWire(conn)
	if !a.raw {
		if err := w.Write(vfiouser.Header{ID: 1, Cmd: vfiouser.CmdVersion}, nil, vfiouser.Version{}.Marshal()); err != nil {
			t.Fatal(err)
		}
		if m, err := w.Read(); err != nil || m.Flags&vfiouser.FlagError != 0 {
			t.Fatalf("VERSION: %v %+v", err, m.Header)
		}
	}
	for i, p := range a.pre {
		if err := w.WriteRaw(p, nil); err != nil {
			t.Fatal(err)
		}
		if m, err := w.Read(); err != nil || m.Flags&vfiouser.FlagError != 0 {
			t.Fatalf("%s: setup message %d: %v %+v", a.name, i, err, m.Header)
		}
	}
	var fds []int
	if a.fds != nil {
		fds = a.fds(t)
		defer closeAll(fds)
	}
	if err := w.WriteRaw(a.msg(), fds); err != nil {
		t.Fatalf("send: %v", err)
	}
	if a.halfMsg {
		conn.CloseWrite()
	}
	if a.silent {
		serves(t, a.name, w)
		return
	}
	m, err := w.Read()
	if a.accepted {
		if err != nil || m.Flags&vfiouser.FlagError != 0 || m.ID != 7 {
			t.Fatalf("%s: %v %+v, want it answered without error", a.name, err, m.Header)
		}
		closeAll(m.FDs)
		serves(t, a.name, w)
		return
	}
	if a.want == hangUp {
		if err == nil {
			closeAll(m.FDs)
			t.Fatalf("%s: the server answered %+v, want a hang-up", a.name, m.Header)
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, unix.ECONNRESET) {
			t.Fatalf("%s: %v, want a hang-up", a.name, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v, want an error reply (%v)", a.name, err, a.want)
	}
	closeAll(m.FDs)
	if m.Flags&vfiouser.FlagError == 0 || unix.Errno(m.Error) != a.want || m.ID != 7 {
		t.Fatalf("%s: reply %+v, want error %v (id 7)", a.name, m.Header, a.want)
	}
	serves(t, a.name, w)
}

// serves checks that the session still serves after a refusal: the next
// reply is DEVICE_GET_INFO's.
func serves(t testing.TB, name string, w *vfiouser.Wire) {
	t.Helper()
	if err := w.Write(vfiouser.Header{ID: 8, Cmd: vfiouser.CmdDeviceGetInfo}, nil, vfiouser.Info{Argsz: 16}.Marshal()); err != nil {
		t.Fatal(err)
	}
	if m, err := w.Read(); err != nil || m.Flags&vfiouser.FlagError != 0 || m.ID != 8 {
		t.Fatalf("%s: DEVICE_GET_INFO after the attack: %v %+v", name, err, m.Header)
	}
}
