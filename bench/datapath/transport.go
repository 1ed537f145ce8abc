package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

// The floor's message sizes: an mpqemu BAR_WRITE (16-byte header, 24-byte
// payload) and its RET (16 + 8).
const (
	floorRequest = mpqemu.HeaderSize + mpqemu.BarMsgSize
	floorReply   = mpqemu.HeaderSize + mpqemu.RetSize
)

// transportRounds is how often each row is measured, interleaved with
// the others; the table shows each row's median.
const transportRounds = 5

// accessPath is one way of reaching BAR0: write and read one register
// n times each, returning ns per access (0: the path has no such
// operation).
type accessPath struct {
	name    string
	floor   string // the floor row it is compared with: eventfdFloorName, or "" for the socket floor
	measure func(n int) (write, read float64, err error)
	close   func() error
}

func (b *bench) transportTable(ctx context.Context) (_ *table.Table, err error) {
	t := &table.Table{
		Title: "Transport cost: one 32-bit BAR0 access through each transport, host process, ns/op " +
			"(ratio to the floor of its notification mechanism: a bare socket or eventfd round trip)",
		Header: []string{"path", "write ns/op", "read ns/op", "floor", "write vs floor", "read vs floor"},
	}
	var paths []accessPath
	defer func() {
		for _, p := range paths {
			if p.close != nil {
				err = errors.Join(err, p.close())
			}
		}
	}()
	floor, err := floorPath()
	if err != nil {
		return nil, err
	}
	paths = append(paths, floor)
	locked, err := lockedFloorPath()
	if err != nil {
		return nil, err
	}
	paths = append(paths, locked)
	evfloor, err := eventfdFloorPath()
	if err != nil {
		return nil, err
	}
	paths = append(paths, evfloor)
	mp, err := b.mpqemuPath()
	if err != nil {
		return nil, err
	}
	paths = append(paths, mp)
	extra, err := b.morePaths(ctx)
	paths = append(paths, extra...)
	if err != nil {
		return nil, err
	}

	n := b.cfg.harnessMMIO
	writes := make([][]float64, len(paths))
	reads := make([][]float64, len(paths))
	for range transportRounds {
		for i, p := range paths {
			w, r, err := p.measure(n)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			writes[i] = append(writes[i], w)
			reads[i] = append(reads[i], r)
		}
	}
	for i, p := range paths {
		f, fname := 0, "socket" // paths[0] is the socket floor
		if p.floor == evfloor.name {
			f = slices.IndexFunc(paths, func(q accessPath) bool { return q.name == p.floor })
			fname = "eventfd"
		}
		w, r := medianNS(writes[i]), medianNS(reads[i])
		t.Add(p.name, nsCell(w), nsCell(r), fname, ratioCell(w, medianNS(writes[f])), ratioCell(r, medianNS(reads[f])))
	}
	t.Note("%d accesses per path per round, %d rounds interleaved, median shown; client and server are goroutines of this process, as in the harness", n, transportRounds)
	t.Note("floor: %d bytes out, %d back on a socketpair, both ends net.UnixConn (Go's poller); locked threads: the same with blocking read(2)/write(2) on a blocking fd, each end on its own locked OS thread", floorRequest, floorReply)
	t.Note("eventfd floor: two eventfds ping-ponged, each end waiting in Go's poller (a notification and its answer, as an event channel carries them; the ioreq server waits on its event channel handle this way)")
	t.Note("write = RegRingSlots (latched by the register file, no device work), read = RegID")
	return t, nil
}

func medianNS(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// floorPath is a socketpair whose server end answers each floorRequest
// bytes with floorReply bytes: what any socket transport must pay.
func floorPath() (accessPath, error) {
	client, server, err := socketPair()
	if err != nil {
		return accessPath{}, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, rep := make([]byte, floorRequest), make([]byte, floorReply)
		for {
			if _, err := io.ReadFull(server, req); err != nil {
				return
			}
			if _, err := server.Write(rep); err != nil {
				return
			}
		}
	}()
	req, rep := make([]byte, floorRequest), make([]byte, floorReply)
	trip := func(n int) (float64, error) {
		start := time.Now()
		for range n {
			if _, err := client.Write(req); err != nil {
				return 0, err
			}
			if _, err := io.ReadFull(client, rep); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n), nil
	}
	return accessPath{
		name:    "floor: Unix socket round trip",
		measure: twice(trip),
		close: func() error {
			err := client.Close()
			<-done
			return errors.Join(err, server.Close())
		},
	}, nil
}

// twice makes a floor's measure: a floor has no reads and writes, so
// both columns are its round trip, measured once each.
func twice(trip func(n int) (float64, error)) func(n int) (float64, float64, error) {
	return func(n int) (float64, float64, error) {
		w, err := trip(n)
		if err != nil {
			return 0, 0, err
		}
		r, err := trip(n)
		return w, r, err
	}
}

// socketPair returns both ends of a Unix stream socketpair.
func socketPair() (a, b *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	if a, err = conn(fds[0]); err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	if b, err = conn(fds[1]); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// registerAccess is what a transport's test client offers.
type registerAccess interface {
	Read32(off uint32) uint32
	Write32(off, v uint32)
	Err() error
}

// timeAccesses writes RegRingSlots and reads RegID n times each.
func timeAccesses(g registerAccess, n int) (write, read float64, err error) {
	start := time.Now()
	for i := range n {
		g.Write32(abi.RegRingSlots, uint32(i))
	}
	write = float64(time.Since(start).Nanoseconds()) / float64(n)
	start = time.Now()
	var last uint32
	for range n {
		last = g.Read32(abi.RegID)
	}
	read = float64(time.Since(start).Nanoseconds()) / float64(n)
	if err := g.Err(); err != nil {
		return 0, 0, err
	}
	if last != abi.IDMagic {
		return 0, 0, fmt.Errorf("ID register read %#x, want %#x", last, abi.IDMagic)
	}
	return write, read, nil
}

// mpqemuPath is the harness over an instance's mpqemu socket.
func (b *bench) mpqemuPath() (accessPath, error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return accessPath{}, err
	}
	vm, err := attachHarness(inst, 16<<20)
	if err != nil {
		return accessPath{}, errors.Join(err, destroy())
	}
	return accessPath{
		name:    "mpqemu: harness over the instance socket",
		measure: func(n int) (float64, float64, error) { return timeAccesses(vm, n) },
		close:   func() error { return errors.Join(vm.Close(), destroy()) },
	}, nil
}

// lockedFloorPath is the floor with a blocking read loop on a locked OS
// thread at each end instead of Go's poller: the design the transport
// issue proposed for mpqemu's server, measured beside the floor.
func lockedFloorPath() (accessPath, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return accessPath{}, fmt.Errorf("socketpair: %w", err)
	}
	client, server := fds[0], fds[1]
	readFull := func(fd int, p []byte) error {
		for n := 0; n < len(p); {
			k, err := unix.Read(fd, p[n:])
			if err != nil {
				return err
			}
			if k == 0 {
				return io.EOF
			}
			n += k
		}
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		req, rep := make([]byte, floorRequest), make([]byte, floorReply)
		for readFull(server, req) == nil {
			if _, err := unix.Write(server, rep); err != nil {
				return
			}
		}
	}()
	req, rep := make([]byte, floorRequest), make([]byte, floorReply)
	trip := func(n int) (float64, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := time.Now()
		for range n {
			if _, err := unix.Write(client, req); err != nil {
				return 0, err
			}
			if err := readFull(client, rep); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n), nil
	}
	return accessPath{
		name:    "floor, blocking reads on locked threads",
		measure: twice(trip),
		close: func() error {
			unix.Shutdown(client, unix.SHUT_RDWR)
			<-done
			return errors.Join(unix.Close(client), unix.Close(server))
		},
	}, nil
}

// eventfdFloorName names the eventfd floor row; the Xen row compares with it.
const eventfdFloorName = "floor: eventfd round trip (Go's poller)"

// eventfdFloorPath is a notification and its answer on two eventfds,
// each end waiting in Go's poller: the floor of a transport whose
// requests live in shared memory and whose notifications are events
// (Xen's event channels; the ioreq server waits on its handle this way).
func eventfdFloorPath() (accessPath, error) {
	mk := func() (*os.File, error) {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return nil, fmt.Errorf("eventfd: %w", err)
		}
		return os.NewFile(uintptr(fd), "eventfd"), nil
	}
	req, err := mk()
	if err != nil {
		return accessPath{}, err
	}
	rep, err := mk()
	if err != nil {
		req.Close()
		return accessPath{}, err
	}
	// wait consumes one notification (the counter), waiting for it in
	// the poller; it fails once the file is closed.
	wait := func(f *os.File) error {
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		var b [8]byte
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			_, rerr = unix.Read(int(fd), b[:])
			return !errors.Is(rerr, unix.EAGAIN)
		})
		return errors.Join(err, rerr)
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wait(req) == nil {
			if _, err := rep.Write(one); err != nil {
				return
			}
		}
	}()
	trip := func(n int) (float64, error) {
		start := time.Now()
		for range n {
			if _, err := req.Write(one); err != nil {
				return 0, err
			}
			if err := wait(rep); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n), nil
	}
	return accessPath{
		name:    eventfdFloorName,
		measure: twice(trip),
		close: func() error {
			err := req.Close() // ends the answering goroutine's wait
			<-done
			return errors.Join(err, rep.Close())
		},
	}, nil
}
