package mpqemu_test

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/fdtest"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

func pipe(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	a, b, err := mpqemutest.Pipe()
	if err != nil {
		t.Fatalf("Pipe: %v", err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func memfd(t *testing.T, size int64) int {
	t.Helper()
	fd, err := guestmem.NewSealed("mpqemu-test", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestPayloadRoundTrip(t *testing.T) {
	cfg := mpqemu.ConfigMsg{Addr: 0x10, Val: 0xffffffff, Len: 4}
	if got, err := mpqemu.UnmarshalConfigMsg(cfg.Marshal()); err != nil || got != cfg {
		t.Errorf("UnmarshalConfigMsg(Marshal(%+v)) = %+v, %v", cfg, got, err)
	}
	bar := mpqemu.BarMsg{Addr: 0xfebf0058, Val: 0x1234567890, Size: 4, Memory: true}
	if got, err := mpqemu.UnmarshalBarMsg(bar.Marshal()); err != nil || got != bar {
		t.Errorf("UnmarshalBarMsg(Marshal(%+v)) = %+v, %v", bar, got, err)
	}
	s := &mpqemu.SyncSysmemMsg{}
	for i := range mpqemu.MaxFDs {
		s.GPAs[i], s.Sizes[i], s.Offsets[i] = uint64(i)<<32, uint64(i+1)<<20, uint64(i)*3
	}
	got, err := mpqemu.UnmarshalSyncSysmemMsg(s.Marshal())
	if err != nil {
		t.Fatalf("UnmarshalSyncSysmemMsg: %v", err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("SyncSysmemMsg round trip (-want +got):\n%s", diff)
	}
	// Pinned layouts: QEMU's x86-64 structs.
	if b := bar.Marshal(); len(b) != 24 || b[20] != 1 || !bytes.Equal(b[21:], []byte{0, 0, 0}) || b[16] != 4 {
		t.Errorf("BarMsg.Marshal() = %x, want 24 bytes, size at 16, memory at 20", b)
	}
	if b := cfg.Marshal(); len(b) != 12 || b[0] != 0x10 || b[8] != 4 {
		t.Errorf("ConfigMsg.Marshal() = %x, want 12 bytes, addr at 0, len at 8", b)
	}
	if b := s.Marshal(); len(b) != 192 || b[64] != 0 || b[64+2] != 0x10 {
		t.Errorf("SyncSysmemMsg.Marshal() sizes not at offset 64")
	}
}

func TestWireRoundTrip(t *testing.T) {
	fdA, fdB := memfd(t, 4096), memfd(t, 8192)
	var sync mpqemu.SyncSysmemMsg
	sync.GPAs[1], sync.Sizes[0], sync.Sizes[1] = 0x100000, 4096, 8192
	tests := []struct {
		name string
		msg  mpqemu.Msg
	}{
		{"sync sysmem", mpqemu.Msg{Cmd: mpqemu.CmdSyncSysmem, Payload: sync.Marshal(), FDs: []int{fdA, fdB}}},
		{"sync sysmem same fd twice", mpqemu.Msg{Cmd: mpqemu.CmdSyncSysmem, Payload: sync.Marshal(), FDs: []int{fdA, fdA}}},
		{"ret", mpqemu.Ret(0xdeadbeefcafe)},
		{"cfg write", mpqemu.Msg{Cmd: mpqemu.CmdPCICfgWrite, Payload: mpqemu.ConfigMsg{Addr: 4, Val: 6, Len: 2}.Marshal()}},
		{"cfg read", mpqemu.Msg{Cmd: mpqemu.CmdPCICfgRead, Payload: mpqemu.ConfigMsg{Addr: 0, Len: 4}.Marshal()}},
		{"bar write", mpqemu.Msg{Cmd: mpqemu.CmdBarWrite, Payload: mpqemu.BarMsg{Addr: 1, Val: 2, Size: 4, Memory: true}.Marshal()}},
		{"bar read", mpqemu.Msg{Cmd: mpqemu.CmdBarRead, Payload: mpqemu.BarMsg{Addr: 1, Size: 8}.Marshal()}},
		{"set irqfd", mpqemu.Msg{Cmd: mpqemu.CmdSetIRQFD, FDs: []int{fdA, fdB}}},
		{"device reset", mpqemu.Msg{Cmd: mpqemu.CmdDeviceReset}},
	}
	a, b := pipe(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := mpqemu.WriteMsg(a, tt.msg); err != nil {
				t.Fatalf("WriteMsg: %v", err)
			}
			got, err := mpqemu.ReadMsg(b)
			if err != nil {
				t.Fatalf("ReadMsg: %v", err)
			}
			t.Cleanup(func() {
				for _, fd := range got.FDs {
					unix.Close(fd)
				}
			})
			if got.Cmd != tt.msg.Cmd || !bytes.Equal(got.Payload, tt.msg.Payload) || len(got.FDs) != len(tt.msg.FDs) {
				t.Fatalf("ReadMsg() = %v %x %d fds, want %v %x %d fds", got.Cmd, got.Payload, len(got.FDs), tt.msg.Cmd, tt.msg.Payload, len(tt.msg.FDs))
			}
			for i, fd := range got.FDs {
				var st, want unix.Stat_t
				unix.Fstat(fd, &st)
				unix.Fstat(tt.msg.FDs[i], &want)
				if st.Ino != want.Ino {
					t.Errorf("fd %d: inode %d, want %d", i, st.Ino, want.Ino)
				}
				if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
					t.Errorf("fd %d received without FD_CLOEXEC", i)
				}
			}
		})
	}
}

// TestPartialHeader feeds the header one byte at a time, fds on the first.
func TestPartialHeader(t *testing.T) {
	a, b := pipe(t)
	fd := memfd(t, 4096)
	var s mpqemu.SyncSysmemMsg
	s.Sizes[0] = 4096
	raw := (&mpqemu.Msg{Cmd: mpqemu.CmdSyncSysmem, Payload: s.Marshal()}).Encode(nil)
	done := make(chan error, 1)
	go func() {
		if _, _, err := a.WriteMsgUnix(raw[:1], unix.UnixRights(fd), nil); err != nil {
			done <- err
			return
		}
		for i := 1; i < len(raw); i++ {
			if _, err := a.Write(raw[i : i+1]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	m, err := mpqemu.ReadMsg(b)
	if werr := <-done; werr != nil {
		t.Fatalf("writer: %v", werr)
	}
	if err != nil {
		t.Fatalf("ReadMsg: %v", err)
	}
	defer unix.Close(m.FDs[0])
	if m.Cmd != mpqemu.CmdSyncSysmem || len(m.FDs) != 1 || !bytes.Equal(m.Payload, raw[16:]) {
		t.Errorf("ReadMsg() = %v with %d fds, want SYNC_SYSMEM with 1 fd", m.Cmd, len(m.FDs))
	}
}

func TestReadMsgRejects(t *testing.T) {
	fd := memfd(t, 4096)
	hdr := func(cmd, size uint64) []byte {
		b := make([]byte, 16)
		b[0], b[1], b[2], b[3] = byte(cmd), byte(cmd>>8), byte(cmd>>16), byte(cmd>>24)
		for i := range 8 {
			b[8+i] = byte(size >> (8 * i))
		}
		return b
	}
	nine := []int{fd, fd, fd, fd, fd, fd, fd, fd, fd}
	tests := []struct {
		name string
		raw  []byte
		fds  []int
	}{
		{"unknown cmd", hdr(8, 0), nil},
		{"negative cmd", hdr(0xffffffff, 0), nil},
		{"size too big", hdr(uint64(mpqemu.CmdPCICfgRead), 193), nil},
		{"huge size", hdr(uint64(mpqemu.CmdBarRead), 1<<63), nil},
		{"cfg wrong size", append(hdr(uint64(mpqemu.CmdPCICfgRead), 8), make([]byte, 8)...), nil},
		{"bar wrong size", append(hdr(uint64(mpqemu.CmdBarRead), 12), make([]byte, 12)...), nil},
		{"bar with fd", append(hdr(uint64(mpqemu.CmdBarWrite), 24), make([]byte, 24)...), []int{fd}},
		{"sync without fd", append(hdr(uint64(mpqemu.CmdSyncSysmem), 192), make([]byte, 192)...), nil},
		{"sync with 9 fds", append(hdr(uint64(mpqemu.CmdSyncSysmem), 192), make([]byte, 192)...), nine},
		{"irqfd with 1 fd", hdr(uint64(mpqemu.CmdSetIRQFD), 0), []int{fd}},
		{"irqfd with payload", append(hdr(uint64(mpqemu.CmdSetIRQFD), 8), make([]byte, 8)...), []int{fd, fd}},
		{"reset with payload", append(hdr(uint64(mpqemu.CmdDeviceReset), 8), make([]byte, 8)...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pipe(t)
			before := fdtest.Open(t)
			var err error
			if len(tt.fds) > 0 {
				_, _, err = a.WriteMsgUnix(tt.raw, unix.UnixRights(tt.fds...), nil)
			} else {
				_, err = a.Write(tt.raw)
			}
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			m, err := mpqemu.ReadMsg(b)
			if !errors.Is(err, mpqemu.ErrProtocol) {
				t.Errorf("ReadMsg() = %v, %v, want ErrProtocol", m.Cmd, err)
			}
			// More open afterwards is a leak; fewer is the runtime or
			// an earlier test's cleanup closing one meanwhile.
			if after := fdtest.Open(t); after > before {
				t.Errorf("open fds: %d after, %d before: received fds leaked", after, before)
			}
		})
	}
}

func TestReadMsgEOF(t *testing.T) {
	a, b := pipe(t)
	a.Write([]byte{1, 0, 0})
	a.Close()
	if _, err := mpqemu.ReadMsg(b); err == nil || errors.Is(err, mpqemu.ErrProtocol) {
		t.Errorf("ReadMsg(truncated) = %v, want an I/O error", err)
	}
}

func FuzzDecode(f *testing.F) {
	var s mpqemu.SyncSysmemMsg
	s.Sizes[0] = 4096
	seeds := []mpqemu.Msg{
		{Cmd: mpqemu.CmdSyncSysmem, Payload: s.Marshal()},
		mpqemu.Ret(7),
		{Cmd: mpqemu.CmdPCICfgRead, Payload: mpqemu.ConfigMsg{Addr: 0x10, Len: 4}.Marshal()},
		{Cmd: mpqemu.CmdBarWrite, Payload: mpqemu.BarMsg{Addr: 0xfebf0058, Val: 1, Size: 4, Memory: true}.Marshal()},
		{Cmd: mpqemu.CmdSetIRQFD},
		{Cmd: mpqemu.CmdDeviceReset},
	}
	for _, m := range seeds {
		f.Add(m.Encode(nil), uint8(1))
		f.Add(m.Encode(nil), uint8(2))
		f.Add(m.Encode(nil), uint8(0))
	}
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, nfds uint8) {
		fds := make([]int, nfds%12)
		for i := range fds {
			fds[i] = 100 + i
		}
		m, err := mpqemu.Decode(b, fds)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode() = %+v, %v: non-nil result with error", m, err)
			}
			if !errors.Is(err, mpqemu.ErrProtocol) {
				t.Fatalf("Decode() error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Validate(Decode()) = %v", err)
		}
		enc := m.Encode(nil)
		// The 4 padding bytes of the header are not preserved.
		if !bytes.Equal(enc[:4], b[:4]) || !bytes.Equal(enc[8:], b[8:]) {
			t.Fatalf("Encode(Decode(%x)) = %x", b, enc)
		}
		m2, err := mpqemu.Decode(enc, m.FDs)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) = %v", err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("decode->encode->decode (-first +second):\n%s", diff)
		}
		switch m.Cmd {
		case mpqemu.CmdBarRead, mpqemu.CmdBarWrite:
			bm, err := mpqemu.UnmarshalBarMsg(m.Payload)
			if err != nil {
				t.Fatalf("UnmarshalBarMsg: %v", err)
			}
			if bm2, _ := mpqemu.UnmarshalBarMsg(bm.Marshal()); bm2 != bm {
				t.Fatalf("BarMsg round trip: %+v != %+v", bm2, bm)
			}
		case mpqemu.CmdPCICfgRead, mpqemu.CmdPCICfgWrite:
			cm, err := mpqemu.UnmarshalConfigMsg(m.Payload)
			if err != nil || !bytes.Equal(cm.Marshal(), m.Payload) {
				t.Fatalf("ConfigMsg round trip: %v", err)
			}
		case mpqemu.CmdSyncSysmem:
			sm, err := mpqemu.UnmarshalSyncSysmemMsg(m.Payload)
			if err != nil || !bytes.Equal(sm.Marshal(), m.Payload) {
				t.Fatalf("SyncSysmemMsg round trip: %v", err)
			}
		case mpqemu.CmdRet:
			if _, err := mpqemu.RetValue(m.Payload); err != nil {
				t.Fatalf("RetValue: %v", err)
			}
		}
	})
}
