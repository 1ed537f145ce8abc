package mpqemu_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
)

// TestConformance runs the transport conformance suite over QEMU's
// multi-process protocol, the harness VM playing QEMU.
func TestConformance(t *testing.T) { transporttest.Run(t, conformance{}) }

type conformance struct{}

func (conformance) Name() string             { return "mpqemu" }
func (conformance) Socket() transport.Socket { return mpqemu.Transport{} }

func (conformance) Attach(t testing.TB, inst *mdev.Instance, ram uint64) transporttest.Guest {
	t.Helper()
	vm, err := mpqemutest.Dial(inst.Socket(), ram)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

// raw is a message as bytes, with an fd attached or not; reply says
// whether one RET comes back before the hang-up; halfMsg closes the
// write side after it (the rest of the message never comes).
type raw struct {
	name    string
	msg     []byte
	withFD  bool
	reply   bool
	halfMsg bool
}

func header(cmd mpqemu.Cmd, size uint64, payload int) []byte {
	b := (&mpqemu.Msg{Cmd: cmd, Payload: []byte{}}).Encode(nil)
	for i := range 8 {
		b[8+i] = byte(size >> (8 * i))
	}
	return append(b, make([]byte, payload)...)
}

func (conformance) Hostile() []transporttest.Attack {
	bar := func(cmd mpqemu.Cmd, addr uint64, memory bool) []byte {
		return (&mpqemu.Msg{Cmd: cmd, Payload: mpqemu.BarMsg{Addr: addr, Size: 4, Memory: memory}.Marshal()}).Encode(nil)
	}
	cases := []raw{
		{"size-too-big", header(mpqemu.CmdPCICfgRead, 4096, 0), false, false, false},
		{"size-huge", header(mpqemu.CmdSyncSysmem, 1<<62, 0), false, false, false},
		{"bad-bar-size", header(mpqemu.CmdBarRead, 20, 20), false, false, false},
		{"unknown-cmd", header(42, 0, 0), false, false, false},
		{"ret-to-remote", header(mpqemu.CmdRet, 8, 8), false, false, false},
		{"fd-on-bar-write", header(mpqemu.CmdBarWrite, 24, 24), true, false, false},
		{"one-fd-for-irqfd", header(mpqemu.CmdSetIRQFD, 0, 0), true, false, false},
		{"sysmem-unsealed", syncSysmem(), true, false, false},
		{"bar-past-bar0", bar(mpqemu.CmdBarRead, mpqemutest.BAR0Addr+abi.BAR0Size, true), false, true, false},
		{"bar-in-io-space", bar(mpqemu.CmdBarRead, mpqemutest.BAR0Addr, false), false, true, false},
		{"truncated", header(mpqemu.CmdBarWrite, 24, 3), false, false, true},
	}
	var out []transporttest.Attack
	for _, c := range cases {
		out = append(out, transporttest.Attack{Name: c.name, Run: func(t testing.TB, inst *mdev.Instance) { c.run(t, inst) }})
	}
	return out
}

// syncSysmem announces one 1 MiB region at 0 (its fd comes with it).
func syncSysmem() []byte {
	s := mpqemu.SyncSysmemMsg{}
	s.Sizes[0] = 1 << 20
	return (&mpqemu.Msg{Cmd: mpqemu.CmdSyncSysmem, Payload: s.Marshal()}).Encode(nil)
}

// run programs BAR0 through a proper config write, sends the bad message
// and reads until vgpud hangs up.
func (c raw) run(t testing.TB, inst *mdev.Instance) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	for _, cfg := range []mpqemu.ConfigMsg{{Addr: 0x10, Val: mpqemutest.BAR0Addr, Len: 4}, {Addr: 0x04, Val: 2, Len: 2}} {
		if err := mpqemu.WriteMsg(conn, mpqemu.Msg{Cmd: mpqemu.CmdPCICfgWrite, Payload: cfg.Marshal()}); err != nil {
			t.Fatal(err)
		}
		if _, err := mpqemu.ReadMsg(conn); err != nil {
			t.Fatalf("config write: %v", err)
		}
	}
	if c.withFD {
		fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC) // unsealed
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, 1<<20); err != nil {
			t.Fatal(err)
		}
		_, _, err = conn.WriteMsgUnix(c.msg, unix.UnixRights(fd), nil)
		if err != nil {
			t.Fatal(err)
		}
	} else if _, err := conn.Write(c.msg); err != nil {
		t.Fatal(err)
	}
	if c.halfMsg {
		conn.CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	all, err := io.ReadAll(conn)
	if err != nil && !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("%s: vgpud did not hang up: %v", c.name, err)
	}
	if want := mpqemu.HeaderSize + mpqemu.RetSize; c.reply && len(all) != want {
		t.Errorf("%s: %d bytes back, want one RET (%d)", c.name, len(all), want)
	}
	if !c.reply && len(all) != 0 {
		t.Errorf("%s: %d bytes back, want none", c.name, len(all))
	}
}
