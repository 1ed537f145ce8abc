package vfiouser_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/fdtest"
	"github.com/vgpud/vgpud/internal/sockpairtest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// msg is one message as a client sends it: hdr's size is set from body.
func msg(h vfiouser.Header, body []byte) []byte {
	h.Size = uint32(vfiouser.HeaderSize + len(body))
	b := make([]byte, vfiouser.HeaderSize, int(h.Size))
	h.Put(b)
	return append(b, body...)
}

// serverFD is the descriptor of the server's end, as the keeper holds it.
func serverFD(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	f, err := c.File() // a duplicate; c stays open
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// farewellReplies ends the server's side for writing, as the keeper does
// after the farewell, and returns what the client reads up to the end.
func farewellReplies(t *testing.T, client *net.UnixConn, fd int) []vfiouser.Header {
	t.Helper()
	if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(time.Minute))
	b, err := io.ReadAll(client)
	if err != nil {
		t.Fatalf("client read %d bytes, then %v", len(b), err)
	}
	if len(b)%vfiouser.HeaderSize != 0 {
		t.Fatalf("client read %d bytes: not whole headers", len(b))
	}
	var hs []vfiouser.Header
	for ; len(b) > 0; b = b[vfiouser.HeaderSize:] {
		hs = append(hs, vfiouser.ParseHeader(b))
	}
	return hs
}

// Every request that waits for a reply gets an error reply with its ID
// and command; a posted write, a reply and a message whose rest never
// comes get none; the descriptors that came with the requests are
// closed.
func TestRefuseWaiting(t *testing.T) {
	client, server := sockpairtest.Stream(t)
	fd := serverFD(t, server)
	memfd, err := unix.MemfdCreate("dma", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memfd)
	read := msg(vfiouser.Header{ID: 5, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16))
	posted := msg(vfiouser.Header{ID: 6, Cmd: vfiouser.CmdRegionWrite, Flags: vfiouser.FlagNoReply}, make([]byte, 20))
	reply := msg(vfiouser.Header{ID: 7, Cmd: vfiouser.CmdRegionRead, Flags: vfiouser.TypeReply}, nil)
	dmaMap := msg(vfiouser.Header{ID: 8, Cmd: vfiouser.CmdDMAMap}, vfiouser.DMAMap{Argsz: 32, Flags: vfiouser.DMAFlagRead, Addr: 0x1000, Size: 0x1000}.Marshal())
	partial := msg(vfiouser.Header{ID: 9, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16))[:20]
	if _, err := client.Write(append(append(read, posted...), reply...)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.WriteMsgUnix(dmaMap, unix.UnixRights(memfd), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(partial); err != nil {
		t.Fatal(err)
	}
	before := fdtest.Open(t)
	answered, err := vfiouser.RefuseWaiting(fd)
	if err != nil {
		t.Fatal(err)
	}
	if after := fdtest.Open(t); after != before {
		t.Errorf("%d descriptors open after the farewell, %d before: the DMA_MAP's memfd was kept", after, before)
	}
	hs := farewellReplies(t, client, fd)
	want := []vfiouser.Header{
		{ID: 5, Cmd: vfiouser.CmdRegionRead, Size: vfiouser.HeaderSize, Flags: vfiouser.TypeReply | vfiouser.FlagError, Error: uint32(vfiouser.FarewellErrno)},
		{ID: 8, Cmd: vfiouser.CmdDMAMap, Size: vfiouser.HeaderSize, Flags: vfiouser.TypeReply | vfiouser.FlagError, Error: uint32(vfiouser.FarewellErrno)},
	}
	if answered != len(want) || len(hs) != len(want) {
		t.Fatalf("answered %d, client read %+v; want %+v", answered, hs, want)
	}
	for i := range want {
		if hs[i] != want[i] {
			t.Errorf("reply %d: %+v, want %+v", i, hs[i], want[i])
		}
	}
}

// A header that frames no message ends the answers: the requests before
// it are answered, nothing after it is trusted.
func TestRefuseWaitingStopsAtGarbage(t *testing.T) {
	client, server := sockpairtest.Stream(t)
	fd := serverFD(t, server)
	first := msg(vfiouser.Header{ID: 1, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16))
	garbage := msg(vfiouser.Header{ID: 2, Cmd: vfiouser.CmdRegionRead, Flags: 7}, nil)
	after := msg(vfiouser.Header{ID: 3, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16))
	if _, err := client.Write(append(append(first, garbage...), after...)); err != nil {
		t.Fatal(err)
	}
	answered, err := vfiouser.RefuseWaiting(fd)
	if err == nil {
		t.Error("a message of type 7 was not refused")
	}
	hs := farewellReplies(t, client, fd)
	if answered != 1 || len(hs) != 1 || hs[0].ID != 1 {
		t.Fatalf("answered %d, client read %+v; want request 1's error reply alone", answered, hs)
	}
}

// After the farewell the client can send nothing more: its write fails at
// once (QEMU's access then fails, instead of waiting out its timeout for
// a reply that cannot come), and it reads the answers, then the end.
func TestRefuseWaitingEndsTheClientsSends(t *testing.T) {
	client, server := sockpairtest.Stream(t)
	fd := serverFD(t, server)
	if _, err := client.Write(msg(vfiouser.Header{ID: 1, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16))); err != nil {
		t.Fatal(err)
	}
	if answered, err := vfiouser.RefuseWaiting(fd); answered != 1 || err != nil {
		t.Fatalf("RefuseWaiting = %d, %v; want 1, nil", answered, err)
	}
	_, err := client.Write(msg(vfiouser.Header{ID: 2, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16)))
	if !errors.Is(err, unix.EPIPE) {
		t.Fatalf("the client's write after the farewell: %v, want EPIPE", err)
	}
	if hs := farewellReplies(t, client, fd); len(hs) != 1 || hs[0].ID != 1 {
		t.Fatalf("client read %+v, want request 1's error reply alone", hs)
	}
}

// A client gone before its answer: the farewell reports the failed write
// (EPIPE), and no signal ends the process.
func TestRefuseWaitingClientGone(t *testing.T) {
	client, server := sockpairtest.Stream(t)
	fd := serverFD(t, server)
	if _, err := client.Write(msg(vfiouser.Header{ID: 1, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16))); err != nil {
		t.Fatal(err)
	}
	client.Close()
	if _, err := vfiouser.RefuseWaiting(fd); !errors.Is(err, unix.EPIPE) {
		t.Fatalf("RefuseWaiting to a closed client: %v, want EPIPE", err)
	}
}

// Nothing waiting: nothing answered.
func TestRefuseWaitingNothing(t *testing.T) {
	client, server := sockpairtest.Stream(t)
	fd := serverFD(t, server)
	answered, err := vfiouser.RefuseWaiting(fd)
	if err != nil || answered != 0 {
		t.Fatalf("RefuseWaiting = %d, %v; want 0, nil", answered, err)
	}
	if hs := farewellReplies(t, client, fd); len(hs) != 0 {
		t.Fatalf("client read %+v, want nothing", hs)
	}
}

// Whatever a client sent, the farewell ends, and what it wrote are error
// replies, as many as it says it answered.
func FuzzRefuseWaiting(f *testing.F) {
	f.Add(msg(vfiouser.Header{ID: 5, Cmd: vfiouser.CmdRegionRead}, make([]byte, 16)))
	f.Add(msg(vfiouser.Header{ID: 6, Cmd: vfiouser.CmdRegionWrite, Flags: vfiouser.FlagNoReply}, make([]byte, 20)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0})
	f.Fuzz(func(t *testing.T, sent []byte) {
		client, server := sockpairtest.Stream(t)
		fd := serverFD(t, server)
		if _, err := client.Write(sent); err != nil {
			t.Skip("the socket refused the bytes") // larger than its buffer
		}
		answered, _ := vfiouser.RefuseWaiting(fd)
		hs := farewellReplies(t, client, fd)
		if len(hs) != answered {
			t.Fatalf("answered %d, wrote %d replies", answered, len(hs))
		}
		for _, h := range hs {
			if h.Size != vfiouser.HeaderSize || h.Flags != vfiouser.TypeReply|vfiouser.FlagError || h.Error != uint32(vfiouser.FarewellErrno) {
				t.Fatalf("reply %+v is not an error reply", h)
			}
		}
	})
}
