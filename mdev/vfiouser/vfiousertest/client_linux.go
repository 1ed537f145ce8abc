// Package vfiousertest plays the client (QEMU's) side of vfio-user,
// written from the specification (QEMU's docs/interop/vfio-user.rst): a
// QEMU-less VM whose RAM is a sealed memfd, mapped for DMA like a pc
// machine's, with INTx and its unmask (KVM's resample) as eventfds and the
// kick doorbell as the ioeventfd the server offers. It is the test client
// of vfiouser's tests and conformance suite, and of bench/datapath.
package vfiousertest

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/guestmemtest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mmio"
)

// BAR0Addr is where the client programs BAR0 in config space (vfio-user
// accesses carry region offsets, so it only matters to the config space).
const BAR0Addr = 0xfebf0000

// ErrClosed is returned by a Client's methods after Close.
var ErrClosed = errors.New("vfiousertest: client closed")

// ErrReply wraps an error reply's errno.
var ErrReply = errors.New("vfio-user error reply")

// Client is one QEMU-less VM attached to a vGPU over vfio-user. Requests
// are serialised; Alloc, ReadRAM and WriteRAM may run concurrently.
type Client struct {
	*guestmemtest.RAM

	ioMu   sync.Mutex
	conn   *net.UnixConn
	wire   *vfiouser.Wire
	id     uint16
	err    error // first transport error
	closed bool
	buf    [vfiouser.RegionAccessSize + 8]byte
	rbuf   [vfiouser.HeaderSize + vfiouser.RegionAccessSize + 8]byte // a register access's reply

	irqFD, unmaskFD, kickFD int

	// What DEVICE_GET_INFO and the region queries said.
	NumRegions, NumIRQs  uint32
	BAR0Size, ConfigSize uint64
	// MaxXfer is the server's max_data_xfer_size.
	MaxXfer uint64

	// Posted makes BAR0 writes posted, as QEMU's vfio-user-pci sends
	// them for memory BARs (region.post_wr, unless x-no-posted-writes):
	// REGION_WRITE with No_reply, no reply awaited, an error unseen. The
	// server handles messages in order, so a later read still sees the
	// write. New sets it; set it before using the client from several
	// goroutines.
	Posted bool
}

var (
	_ driver.Registers = (*Client)(nil)
	_ driver.Memory    = (*Client)(nil)
)

// Mode is how a client reaches BAR0, which decides how it may order its
// writes.
type Mode int

const (
	// IOEventfd is a client that wires the server's kick ioeventfd (what
	// KVM's KVM_IOEVENTFD would do): a store to abi.RegRingKick is one
	// eventfd write that never crosses the socket. Such a client must
	// not post writes: a kick could overtake a posted write still in
	// the socket (QEMU turns posted writes off for the same reason when
	// it mmaps a region). Its BAR0 writes wait for their replies.
	IOEventfd Mode = iota
	// QEMU101 is what QEMU 10.1's vfio-user-pci does without KVM (TCG,
	// the only QEMU that runs here): BAR0 writes are posted (No_reply),
	// DEVICE_GET_REGION_IO_FDS is never asked, so the kick is a posted
	// REGION_WRITE like any other store, and the end of an interrupt is
	// a SET_IRQS UNMASK message (no unmask eventfd).
	QEMU101
)

// New negotiates VERSION on conn, queries the device, maps ramBytes of
// guest RAM for DMA, wires INTx, fetches the kick ioeventfd and programs
// config space, as QEMU's vfio-user-pci does at realize (mode
// IOEventfd; NewMode picks the mode). It takes ownership of conn: on
// error conn is closed.
func New(conn *net.UnixConn, ramBytes uint64) (*Client, error) {
	return newClient(conn, ramBytes, IOEventfd, false)
}

// NewMode is New with the client's mode.
func NewMode(conn *net.UnixConn, ramBytes uint64, mode Mode) (*Client, error) {
	return newClient(conn, ramBytes, mode, false)
}

// NewUnsealed is New with guest RAM whose memfd is not sealed, which
// vgpud must refuse (the DMA_MAP fails).
func NewUnsealed(conn *net.UnixConn, ramBytes uint64) (*Client, error) {
	return newClient(conn, ramBytes, QEMU101, true)
}

func newClient(conn *net.UnixConn, ramBytes uint64, mode Mode, unsealed bool) (_ *Client, err error) {
	c := &Client{conn: conn, wire: vfiouser.NewWire(conn), irqFD: -1, unmaskFD: -1, kickFD: -1, Posted: mode == QEMU101}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.RAM, err = guestmemtest.New("vfiousertest-ram", ramBytes, unsealed); err != nil {
		return nil, err
	}
	if err := c.Negotiate(); err != nil {
		return nil, fmt.Errorf("version: %w", err)
	}
	if err := c.query(); err != nil {
		return nil, err
	}
	if err := c.MapRAM(); err != nil {
		return nil, fmt.Errorf("dma map: %w", err)
	}
	if err := c.wireIRQ(); err != nil {
		return nil, err
	}
	if mode == IOEventfd {
		if err := c.fetchKick(); err != nil {
			return nil, err
		}
	}
	if err := c.program(); err != nil {
		return nil, err
	}
	return c, nil
}

// Call sends one command and returns its reply's payload (a copy) and
// fds. An error reply is an error wrapping ErrReply and the errno.
func (c *Client) Call(cmd vfiouser.Cmd, fds []int, payload ...[]byte) ([]byte, []int, error) {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	m, err := c.callLocked(cmd, fds, payload...)
	if err != nil {
		return nil, nil, err
	}
	return append([]byte(nil), m.Payload...), m.FDs, nil
}

// callLocked is Call with ioMu held; the payload aliases the wire's buffer.
func (c *Client) callLocked(cmd vfiouser.Cmd, fds []int, payload ...[]byte) (vfiouser.Msg, error) {
	if c.closed {
		return vfiouser.Msg{}, ErrClosed
	}
	if c.err != nil {
		return vfiouser.Msg{}, c.err
	}
	c.id++
	id := c.id
	if err := c.wire.Write(vfiouser.Header{ID: id, Cmd: cmd, Flags: vfiouser.TypeCommand}, fds, payload...); err != nil {
		c.err = err
		return vfiouser.Msg{}, err
	}
	m, err := c.wire.Read()
	if err != nil {
		c.err = fmt.Errorf("%v reply: %w", cmd, err)
		return vfiouser.Msg{}, c.err
	}
	if m.Type() != vfiouser.TypeReply || m.ID != id || m.Cmd != cmd {
		for _, fd := range m.FDs {
			unix.Close(fd)
		}
		c.err = fmt.Errorf("%v: reply %v id %d type %d, want id %d: %w", cmd, m.Cmd, m.ID, m.Type(), id, vfiouser.ErrProtocol)
		return vfiouser.Msg{}, c.err
	}
	if m.Flags&vfiouser.FlagError != 0 {
		return vfiouser.Msg{}, fmt.Errorf("%v: %w: %w", cmd, ErrReply, unix.Errno(m.Error))
	}
	return m, nil
}

// readReplyLocked reads the reply to the register access just sent, in
// one read when the kernel allows: the server sends nothing unasked and
// no fds with these replies, so asking for the whole expected reply
// never reads into another message (an error reply is shorter: the read
// returns what there is). It returns the payload (aliasing c.rbuf).
func (c *Client) readReplyLocked(cmd vfiouser.Cmd, want int) ([]byte, error) {
	got := 0
	for got < want {
		k, err := c.conn.Read(c.rbuf[got:want])
		got += k
		if err != nil {
			c.err = fmt.Errorf("%v reply: %w", cmd, err)
			return nil, c.err
		}
		if got >= vfiouser.HeaderSize && want > int(vfiouser.ParseHeader(c.rbuf[:]).Size) {
			want = int(vfiouser.ParseHeader(c.rbuf[:]).Size) // an error reply
		}
	}
	h := vfiouser.ParseHeader(c.rbuf[:])
	if h.Type() != vfiouser.TypeReply || h.ID != c.id || h.Cmd != cmd || int(h.Size) != want || want < vfiouser.HeaderSize {
		c.err = fmt.Errorf("%v: reply %+v, want id %d: %w", cmd, h, c.id, vfiouser.ErrProtocol)
		return nil, c.err
	}
	if h.Flags&vfiouser.FlagError != 0 {
		return nil, fmt.Errorf("%v: %w: %w", cmd, ErrReply, unix.Errno(h.Error))
	}
	return c.rbuf[vfiouser.HeaderSize:want], nil
}

// postLocked sends a command with No_reply (ioMu held).
func (c *Client) postLocked(cmd vfiouser.Cmd, payload []byte) error {
	if c.closed {
		return ErrClosed
	}
	if c.err != nil {
		return c.err
	}
	c.id++
	if err := c.wire.Write(vfiouser.Header{ID: c.id, Cmd: cmd, Flags: vfiouser.TypeCommand | vfiouser.FlagNoReply}, nil, payload); err != nil {
		c.err = err
		return err
	}
	return nil
}

// QEMUCaps is the capability JSON QEMU's vfio-user client proposes in
// its VERSION request (hw/vfio-user/proxy.c, caps_json, QEMU 10.1: the
// same members and values; QEMU's JSON writer puts a space after ':' and
// ','). The client sends it so the server meets what QEMU sends.
const QEMUCaps = `{"capabilities": {"migration": {"pgsize": 4096, "max_bitmap_size": 268435456}, ` +
	`"max_msg_fds": 16, "max_data_xfer_size": 1048576, "pgsizes": 4096, "max_dma_maps": 65535, "write_multiple": true}}`

// Negotiate sends VERSION 0.0 with QEMU's capabilities and checks the
// reply as QEMU does: same major, minor not above ours, a NUL-terminated
// JSON object whose capabilities are in range, and (QEMU reads the reply
// into the request's buffer) no longer than the request.
func (c *Client) Negotiate() error {
	req := vfiouser.Version{Major: 0, Minor: 0, Caps: append([]byte(QEMUCaps), 0)}.Marshal()
	p, fds, err := c.Call(vfiouser.CmdVersion, nil, req)
	closeAll(fds)
	if err != nil {
		return err
	}
	if len(p) > len(req) {
		return fmt.Errorf("VERSION reply of %d bytes, QEMU's buffer holds %d: %w", len(p), len(req), vfiouser.ErrProtocol)
	}
	v, err := vfiouser.UnmarshalVersion(p)
	if err != nil {
		return err
	}
	if v.Major != 0 || v.Minor != 0 {
		return fmt.Errorf("server version %d.%d: %w", v.Major, v.Minor, vfiouser.ErrProtocol)
	}
	caps, err := ParseCaps(v.Caps)
	if err != nil {
		return err
	}
	c.MaxXfer = caps.MaxDataXfer
	return nil
}

// Caps are the capabilities a VERSION reply announced, defaults filled in
// (the specification's).
type Caps struct {
	MaxMsgFDs, MaxDataXfer, PageSizes, MaxDMAMaps uint64
	WriteMultiple                                 bool
}

// ParseCaps checks a VERSION payload's capability bytes as QEMU's client
// does (proxy.c, caps_check): NUL-terminated JSON, an object, known
// members of the right type and within QEMU's limits.
func ParseCaps(b []byte) (Caps, error) {
	c := Caps{MaxMsgFDs: 1, MaxDataXfer: 1 << 20, PageSizes: 4096, MaxDMAMaps: 65535}
	if len(b) == 0 || b[len(b)-1] != 0 {
		return c, fmt.Errorf("capabilities not NUL-terminated: %w", vfiouser.ErrProtocol)
	}
	var doc struct {
		Capabilities *struct {
			MaxMsgFDs     *uint64          `json:"max_msg_fds"`
			MaxDataXfer   *uint64          `json:"max_data_xfer_size"`
			PageSizes     *uint64          `json:"pgsizes"`
			MaxDMAMaps    *uint64          `json:"max_dma_maps"`
			WriteMultiple *bool            `json:"write_multiple"`
			Migration     *json.RawMessage `json:"migration"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(b[:len(b)-1], &doc); err != nil {
		return c, fmt.Errorf("capabilities %q: %v: %w", b, err, vfiouser.ErrProtocol)
	}
	if k := doc.Capabilities; k != nil {
		switch {
		case k.MaxMsgFDs != nil && *k.MaxMsgFDs > 16:
			return c, fmt.Errorf("max_msg_fds %d above QEMU's 16: %w", *k.MaxMsgFDs, vfiouser.ErrProtocol)
		case k.MaxDataXfer != nil && *k.MaxDataXfer > 64<<20:
			return c, fmt.Errorf("max_data_xfer_size %d above QEMU's 64 MiB: %w", *k.MaxDataXfer, vfiouser.ErrProtocol)
		case k.PageSizes != nil && *k.PageSizes&4095 != 0:
			return c, fmt.Errorf("pgsizes %#x below 4 KiB: %w", *k.PageSizes, vfiouser.ErrProtocol)
		case k.MaxDMAMaps != nil && *k.MaxDMAMaps > 65535:
			return c, fmt.Errorf("max_dma_maps %d above 65535: %w", *k.MaxDMAMaps, vfiouser.ErrProtocol)
		}
		for _, f := range []struct {
			dst *uint64
			src *uint64
		}{{&c.MaxMsgFDs, k.MaxMsgFDs}, {&c.MaxDataXfer, k.MaxDataXfer}, {&c.PageSizes, k.PageSizes}, {&c.MaxDMAMaps, k.MaxDMAMaps}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
		if k.WriteMultiple != nil {
			c.WriteMultiple = *k.WriteMultiple
		}
	}
	return c, nil
}

func (c *Client) query() error {
	p, _, err := c.Call(vfiouser.CmdDeviceGetInfo, nil, vfiouser.Info{Argsz: vfiouser.InfoSize}.Marshal())
	if err != nil {
		return fmt.Errorf("device info: %w", err)
	}
	in, err := vfiouser.UnmarshalInfo(vfiouser.CmdDeviceGetInfo, p)
	if err != nil {
		return err
	}
	if in.Flags&vfiouser.DeviceFlagPCI == 0 || in.Index < vfiouser.NumRegions || in.Count < 1 {
		return fmt.Errorf("device info %+v: not a PCI device with config space and INTx", in)
	}
	c.NumRegions, c.NumIRQs = in.Index, in.Count
	for _, r := range []struct {
		index uint32
		size  *uint64
	}{{vfiouser.RegionBAR0, &c.BAR0Size}, {vfiouser.RegionConfig, &c.ConfigSize}} {
		ri, err := c.RegionInfo(r.index)
		if err != nil {
			return err
		}
		*r.size = ri.Size
	}
	return nil
}

// RegionInfo queries one region.
func (c *Client) RegionInfo(index uint32) (vfiouser.RegionInfo, error) {
	p, _, err := c.Call(vfiouser.CmdDeviceGetRegion, nil, vfiouser.RegionInfo{Argsz: vfiouser.RegionInfoSize, Index: index}.Marshal())
	if err != nil {
		return vfiouser.RegionInfo{}, fmt.Errorf("region %d info: %w", index, err)
	}
	return vfiouser.UnmarshalRegionInfo(p)
}

// MapRAM maps guest RAM for DMA as a pc machine's: [0, 0xa0000) and
// [1 MiB, end), both windows of the memfd at offset == address.
func (c *Client) MapRAM() error {
	for _, w := range []struct{ addr, size uint64 }{
		{0, guestmemtest.LowRAMEnd}, {guestmemtest.HighRAM, c.Size() - guestmemtest.HighRAM},
	} {
		if err := c.DMAMap(w.addr, w.size, w.addr, c.FD()); err != nil {
			return err
		}
	}
	return nil
}

// DMAMap sends one read-write DMA_MAP window (fd < 0: without an fd).
func (c *Client) DMAMap(addr, size, offset uint64, fd int) error {
	var fds []int
	if fd >= 0 {
		fds = []int{fd}
	}
	m := vfiouser.DMAMap{Argsz: vfiouser.DMAMapSize, Flags: vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite, Offset: offset, Addr: addr, Size: size}
	_, _, err := c.Call(vfiouser.CmdDMAMap, fds, m.Marshal())
	return err
}

// DMAUnmap removes a window.
func (c *Client) DMAUnmap(addr, size uint64) error {
	_, _, err := c.Call(vfiouser.CmdDMAUnmap, nil, vfiouser.DMAUnmap{Argsz: vfiouser.DMAUnmapSize, Addr: addr, Size: size}.Marshal())
	return err
}

// wireIRQ gives the server INTx's trigger eventfd and, in mode
// IOEventfd, the unmask eventfd (what KVM's irqfd resampler signals at
// the guest's EOI). In mode QEMU101 (QEMU without KVM's irqchip, as under
// TCG) there is none: QEMU reads the trigger eventfd in its main loop and
// unmasks by message at the EOI it emulates.
func (c *Client) wireIRQ() error {
	var err error
	if c.irqFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	sets := []struct {
		action uint32
		fd     int
	}{{vfiouser.IRQSetActionTrigger, c.irqFD}}
	if !c.Posted {
		if c.unmaskFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return fmt.Errorf("eventfd: %w", err)
		}
		sets = append(sets, struct {
			action uint32
			fd     int
		}{vfiouser.IRQSetActionUnmask, c.unmaskFD})
	}
	for _, s := range sets {
		set := vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: vfiouser.IRQSetDataEventfd | s.action, Index: vfiouser.IRQIntx, Count: 1}
		if _, _, err := c.Call(vfiouser.CmdDeviceSetIRQs, []int{s.fd}, set.Marshal()); err != nil {
			return fmt.Errorf("set irqs: %w", err)
		}
	}
	return nil
}

// fetchKick asks for BAR0's I/O fds and keeps the ioeventfd at
// abi.RegRingKick.
func (c *Client) fetchKick() error {
	req := vfiouser.RegionIOFDs{Argsz: vfiouser.RegionIOFDsSize + 8*vfiouser.IOFDSize, Index: vfiouser.RegionBAR0}
	p, fds, err := c.Call(vfiouser.CmdDeviceGetRegionIO, nil, req.Marshal())
	if err != nil {
		return fmt.Errorf("region io fds: %w", err)
	}
	r, err := vfiouser.UnmarshalRegionIOFDs(p)
	if err != nil {
		closeAll(fds)
		return err
	}
	for _, s := range r.Subs {
		if s.Offset == abi.RegRingKick && s.Type == vfiouser.IOFDTypeIoeventfd && int(s.FDIndex) < len(fds) && c.kickFD < 0 {
			c.kickFD = fds[s.FDIndex]
			fds[s.FDIndex] = -1
		}
	}
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if c.kickFD < 0 {
		return fmt.Errorf("region io fds %+v: no ioeventfd at RegRingKick", r)
	}
	return nil
}

// program programs BAR0 and the command register, as firmware does.
func (c *Client) program() error {
	if err := c.ConfigWrite(mmio.CfgBAR0, 4, BAR0Addr); err != nil {
		return err
	}
	return c.ConfigWrite(mmio.CfgCommand, 2, mmio.CmdMemorySpace|mmio.CmdBusMaster)
}

// access is one REGION_READ (data nil) or REGION_WRITE.
func (c *Client) access(region uint32, off uint64, n int, write bool, v uint64) (uint64, error) {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	r := vfiouser.RegionAccess{Offset: off, Region: region, Count: uint32(n)}
	r.Put(c.buf[:])
	cmd, p := vfiouser.CmdRegionRead, c.buf[:vfiouser.RegionAccessSize]
	if write {
		binary.LittleEndian.PutUint64(c.buf[vfiouser.RegionAccessSize:], v)
		cmd, p = vfiouser.CmdRegionWrite, c.buf[:vfiouser.RegionAccessSize+n]
		if region == vfiouser.RegionBAR0 && c.Posted {
			return 0, c.postLocked(cmd, p)
		}
	}
	if c.closed {
		return 0, ErrClosed
	}
	if c.err != nil {
		return 0, c.err
	}
	c.id++
	if err := c.wire.Write(vfiouser.Header{ID: c.id, Cmd: cmd, Flags: vfiouser.TypeCommand}, nil, p); err != nil {
		c.err = err
		return 0, err
	}
	want := vfiouser.HeaderSize + vfiouser.RegionAccessSize
	if !write {
		want += n
	}
	reply, err := c.readReplyLocked(cmd, want)
	if err != nil || write {
		return 0, err
	}
	got, err := vfiouser.UnmarshalRegionAccess(cmd, reply)
	if err != nil || int(got.Count) != n || len(got.Data) != n {
		return 0, fmt.Errorf("REGION_READ reply %+v: %w", got, vfiouser.ErrProtocol)
	}
	var b [8]byte
	copy(b[:], got.Data)
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Read32 reads the BAR0 register at off; on a transport error it returns
// 0xffffffff and Err reports it.
func (c *Client) Read32(off uint32) uint32 {
	v, err := c.access(vfiouser.RegionBAR0, uint64(off), 4, false, 0)
	if err != nil {
		c.keep(err)
		return 0xffffffff
	}
	return uint32(v)
}

// Write32 writes the BAR0 register at off. A store to abi.RegRingKick
// goes to the ioeventfd the server offered, as KVM routes it: no message.
func (c *Client) Write32(off, v uint32) {
	if off == abi.RegRingKick && c.kickFD >= 0 {
		if err := c.Kick(); err != nil {
			c.keep(err)
		}
		return
	}
	if _, err := c.access(vfiouser.RegionBAR0, uint64(off), 4, true, uint64(v)); err != nil {
		c.keep(err)
	}
}

// keep records a failed register access for Err (error replies too: the
// driver's register accessors cannot return one).
func (c *Client) keep(err error) {
	c.ioMu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.ioMu.Unlock()
}

// Kick rings the doorbell (the tail is in the shadow word the driver
// keeps): in mode IOEventfd one eventfd write, no message, no reply; in
// mode QEMU101 a posted REGION_WRITE of abi.RegRingKick.
func (c *Client) Kick() error {
	if c.kickFD < 0 {
		_, err := c.access(vfiouser.RegionBAR0, abi.RegRingKick, 4, true, 1)
		return err
	}
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(c.kickFD, one[:]); err != nil {
		return fmt.Errorf("kick: %w", err)
	}
	return nil
}

// ConfigRead reads n (1, 2 or 4) bytes of config space.
func (c *Client) ConfigRead(off uint32, n int) (uint32, error) {
	v, err := c.access(vfiouser.RegionConfig, uint64(off), n, false, 0)
	if err != nil {
		return 0xffffffff, fmt.Errorf("config read %#x/%d: %w", off, n, err)
	}
	return uint32(v), nil
}

// ConfigWrite writes n (1, 2 or 4) bytes of config space.
func (c *Client) ConfigWrite(off uint32, n int, v uint32) error {
	if _, err := c.access(vfiouser.RegionConfig, uint64(off), n, true, uint64(v)); err != nil {
		return fmt.Errorf("config write %#x/%d: %w", off, n, err)
	}
	return nil
}

// Reset sends DEVICE_RESET and programs config space again.
func (c *Client) Reset() error {
	if _, _, err := c.Call(vfiouser.CmdDeviceReset, nil); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return c.program()
}

// Err returns the first transport error or error reply of a register
// access.
func (c *Client) Err() error {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	return c.err
}

// IRQCount returns how many interrupts the server signalled since the
// last call (the trigger eventfd's counter), 0 if none.
func (c *Client) IRQCount() (uint64, error) {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	return guestmemtest.ReadCounter(c.irqFD)
}

// WaitIRQ waits until an interrupt was signalled and returns the count.
func (c *Client) WaitIRQ(timeout time.Duration) (uint64, error) {
	return guestmemtest.WaitCounter(c.irqFD, timeout, c.IRQCount)
}

// Resample ends the interrupt: in mode IOEventfd it signals the unmask
// eventfd, as KVM does at the guest's EOI (not ordered with posted
// writes, hence that mode posts none); in mode QEMU101 it sends the
// UNMASK message QEMU sends at the EOI it emulates.
func (c *Client) Resample() error {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.unmaskFD < 0 {
		// QEMU's vfio_pci_intx_eoi: a SET_IRQS UNMASK message, ordered
		// after the posted writes before it (the guest's ack).
		set := vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: vfiouser.IRQSetDataNone | vfiouser.IRQSetActionUnmask, Index: vfiouser.IRQIntx, Count: 1}
		if _, err := c.callLocked(vfiouser.CmdDeviceSetIRQs, nil, set.Marshal()); err != nil {
			return fmt.Errorf("unmask: %w", err)
		}
		return nil
	}
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(c.unmaskFD, one[:]); err != nil {
		return fmt.Errorf("write unmask eventfd: %w", err)
	}
	return nil
}

// Close hangs up and releases the eventfds and guest RAM. Idempotent.
func (c *Client) Close() error {
	c.ioMu.Lock()
	if c.closed {
		c.ioMu.Unlock()
		return nil
	}
	c.closed = true
	c.conn.Close()
	for _, fd := range []int{c.irqFD, c.unmaskFD, c.kickFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	c.ioMu.Unlock()
	if c.RAM != nil {
		return c.RAM.Close()
	}
	return nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
