// Package drivertest is an in-process fake vGPU for testing the guest driver
// and the suite without QEMU or OpenCL. It implements driver.Registers and
// driver.Memory over Go byte slices, decodes the ring with package abi and
// executes commands synchronously when the doorbell is written. Kernels are
// Go functions registered by name; "building" a program only scans its source
// for kernel names and parameter lists (what program-info reports) and fails
// on a "#error" line.
//
// It is a model of the ABI written from the guest's side, not the real
// device: it knows nothing of dom0's implementation, and the end-to-end tests
// against the real harness remain the proof. Pages are handed out at
// shuffled, non-contiguous guest-physical addresses, like the harness.
package drivertest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
)

var le = binary.LittleEndian

// KernelFunc runs a kernel: d is the decoded launch descriptor, buf returns
// the contents of a buffer argument by handle (nil if absent).
type KernelFunc func(d *abi.LaunchDesc, buf func(h uint32) []byte) error

// Config sizes a fake device. Zero fields get defaults.
type Config struct {
	MemSize      uint64 // default 64 MiB
	MaxAlloc     uint64 // default MemSize/2
	MaxWorkGroup uint32 // default 256
	Seed         uint64 // page shuffle
	// Version is what RegVersion reads (default abi.Version); a minor
	// below 4 makes the ABI 1.4 opcodes invalid, as on an older device.
	Version uint32
	// DeviceInfo is what device-info reports; nil: FakeDeviceInfo with
	// its work-item sizes clamped to MaxWorkGroup.
	DeviceInfo *abi.DeviceInfo
	// INTx announces abi.FeatureINTx: RegIntStatus latches a completion
	// cause for each completion record, and the line (Line) rises when a
	// cause is enabled in RegIntEnable (docs/ABI.md "Interrupts").
	INTx bool
	// Printout, if not empty, announces abi.FeaturePrintf: a launch that
	// names a printf buffer gets the header and these bytes in it, as
	// much as fits (docs/ABI.md "Printf output").
	Printout string
}

// FakeDeviceInfo returns the device properties the fake reports by
// default: those of a small little-endian 64-bit device with fp64 and no
// fp16.
func FakeDeviceInfo() abi.DeviceInfo {
	return abi.DeviceInfo{
		MaxWorkItemSizes: [3]uint64{1024, 1024, 64}, LocalMemSize: 32 << 10, MaxConstantBufferSize: 64 << 10,
		MaxConstantArgs: 8, MaxParameterSize: 1024, MemBaseAddrAlign: 1024, MinDataTypeAlignSize: 128,
		MaxClockFrequency: 1000, AddressBits: 64, SingleFPConfig: 0x3e, DoubleFPConfig: 0x3f,
		ProfilingTimerResolution: 1, PrintfBufferSize: 1 << 20,
		PreferredVectorWidth: [abi.NumVecWidths]uint32{16, 8, 4, 2, 4, 2, 0},
		NativeVectorWidth:    [abi.NumVecWidths]uint32{16, 8, 4, 2, 4, 2, 0},
		EndianLittle:         true,
		Extensions:           []string{"cl_khr_byte_addressable_store", "cl_khr_fp64", "cl_khr_int64_base_atomics"},
	}
}

// Device is the fake vGPU.
type Device struct {
	cfg     Config
	kernels map[string]KernelFunc

	mu        sync.Mutex
	pages     map[uint64][]byte // guest page number -> page
	freePFN   []uint64
	ringBase  uint64
	complBase uint64
	slots     uint32
	enabled   bool
	head      uint32
	errReg    abi.Status
	errCount  uint32
	buffers   map[uint32][]byte
	used      uint64
	programs  map[uint32][]abi.KernelInfo // scanned kernels, sorted by name
	Launches  int                         // launches executed
	held      bool                        // Hold: doorbells queue commands
	tail      uint32                      // last tail rung while held
	lost      bool                        // Lose: until a reset
	intStatus uint32                      // RegIntStatus
	intEnable uint32                      // RegIntEnable
	irq       chan struct{}               // the line's rises, not yet taken by Line's Await
}

// Hold makes later doorbells queue their commands instead of running them,
// so that they stay in flight (a kernel that runs for ever); Release runs
// what was queued and ends the hold.
func (f *Device) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held, f.tail = true, f.head
}

// Release runs the commands queued since Hold and ends the hold.
func (f *Device) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = false
	if f.enabled {
		for f.head != f.tail {
			f.exec(f.head)
			f.head++
		}
	}
}

// Lose plays the end of the instance's worker process in vgpud
// (docs/ABI.md "Device lost"): RegError reads StatusDeviceLost, the ring
// stops, the commands in flight never complete, every buffer and program
// is gone, and doorbells are refused with StatusDeviceLost until a reset.
func (f *Device) Lose() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost, f.enabled, f.held = true, false, false
	f.buffers, f.programs, f.used = map[uint32][]byte{}, map[uint32][]abi.KernelInfo{}, 0
	f.fail(abi.StatusDeviceLost)
}

// New returns a fake device with room for 64 Ki guest pages (256 MiB).
func New(cfg Config, kernels map[string]KernelFunc) *Device {
	if cfg.MemSize == 0 {
		cfg.MemSize = 64 << 20
	}
	if cfg.MaxAlloc == 0 {
		cfg.MaxAlloc = cfg.MemSize / 2
	}
	if cfg.MaxWorkGroup == 0 {
		cfg.MaxWorkGroup = 256
	}
	if cfg.Version == 0 {
		cfg.Version = abi.Version
	}
	if cfg.DeviceInfo == nil {
		di := FakeDeviceInfo()
		for i, v := range di.MaxWorkItemSizes {
			di.MaxWorkItemSizes[i] = min(v, uint64(cfg.MaxWorkGroup))
		}
		cfg.DeviceInfo = &di
	}
	const npages = 1 << 16
	pfns := make([]uint64, npages)
	for i := range pfns {
		pfns[i] = 0x100 + uint64(i) // guest RAM from 1 MiB
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	r.Shuffle(len(pfns), func(i, j int) { pfns[i], pfns[j] = pfns[j], pfns[i] })
	return &Device{cfg: cfg, kernels: kernels, irq: make(chan struct{}, 1), pages: map[uint64][]byte{}, freePFN: pfns,
		buffers: map[uint32][]byte{}, programs: map[uint32][]abi.KernelInfo{}}
}

// Alloc implements driver.Memory.
func (f *Device) Alloc(n int) (driver.DMA, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	np := (n + abi.PageSize - 1) / abi.PageSize
	if n <= 0 || np > len(f.freePFN) {
		return driver.DMA{}, fmt.Errorf("fake alloc of %d bytes: out of guest pages", n)
	}
	buf := make([]byte, np*abi.PageSize)
	pages := make([]uint64, np)
	for i := range pages {
		pfn := f.freePFN[len(f.freePFN)-1]
		f.freePFN = f.freePFN[:len(f.freePFN)-1]
		pages[i] = pfn * abi.PageSize
		f.pages[pfn] = buf[i*abi.PageSize : (i+1)*abi.PageSize]
	}
	return driver.DMA{Buf: buf, Pages: pages}, nil
}

// Buffers returns the number of live buffers.
func (f *Device) Buffers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.buffers)
}

// Read32 implements driver.Registers.
func (f *Device) Read32(off uint32) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch off {
	case abi.RegID:
		return abi.IDMagic
	case abi.RegVersion:
		return f.cfg.Version
	case abi.RegStatus:
		var s uint32
		if f.enabled {
			s |= abi.StatusBitRingEnabled
		}
		if f.errReg != abi.StatusOK {
			s |= abi.StatusBitError
		}
		return s
	case abi.RegMemSizeLo:
		return uint32(f.cfg.MemSize)
	case abi.RegMemSizeHi:
		return uint32(f.cfg.MemSize >> 32)
	case abi.RegMaxAllocLo:
		return uint32(f.cfg.MaxAlloc)
	case abi.RegMaxAllocHi:
		return uint32(f.cfg.MaxAlloc >> 32)
	case abi.RegComputeUnits:
		return 2
	case abi.RegMaxRingSlots:
		return abi.MaxRingSlots
	case abi.RegMaxWorkGroup:
		return f.cfg.MaxWorkGroup
	case abi.RegError:
		return uint32(f.errReg)
	case abi.RegErrorCount:
		return f.errCount
	case abi.RegRingHead, abi.RegRingDone, abi.RegRingTail:
		return f.head
	case abi.RegRingSlots:
		return f.slots
	case abi.RegRingBaseLo:
		return uint32(f.ringBase)
	case abi.RegRingBaseHi:
		return uint32(f.ringBase >> 32)
	case abi.RegComplBaseLo:
		return uint32(f.complBase)
	case abi.RegComplBaseHi:
		return uint32(f.complBase >> 32)
	case abi.RegRingCtrl:
		if f.enabled {
			return abi.RingCtrlEnable
		}
		return 0
	case abi.RegFeatures:
		var bits uint32
		if f.cfg.INTx {
			bits |= abi.FeatureINTx
		}
		if f.cfg.Printout != "" {
			bits |= abi.FeaturePrintf
		}
		return bits
	case abi.RegIntStatus:
		return f.intStatus
	case abi.RegIntEnable:
		return f.intEnable
	}
	if off >= abi.RegProfileName && off < abi.RegProfileName+abi.ProfileNameLen {
		return nameWord("fake-1g", off-abi.RegProfileName)
	}
	if off >= abi.RegDeviceName && off < abi.RegDeviceName+abi.DeviceNameLen {
		return nameWord("drivertest fake vgpu", off-abi.RegDeviceName)
	}
	return 0
}

func nameWord(s string, off uint32) uint32 {
	var b [4]byte
	for i := range b {
		if int(off)+i < len(s) {
			b[i] = s[int(off)+i]
		}
	}
	return le.Uint32(b[:])
}

func (f *Device) fail(s abi.Status) {
	f.errReg = s
	f.errCount++
}

// Write32 implements driver.Registers; a doorbell runs the new commands.
func (f *Device) Write32(off, v uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch off {
	case abi.RegIntStatus:
		f.intStatus &^= v
	case abi.RegIntEnable:
		if f.cfg.INTx {
			was := f.intStatus&f.intEnable != 0
			f.intEnable = v & abi.IntAll
			f.updateLine(was)
		}
	case abi.RegErrorAck:
		f.errReg = abi.StatusOK
	case abi.RegRingBaseLo:
		f.ringBase = f.ringBase&^0xffffffff | uint64(v)
	case abi.RegRingBaseHi:
		f.ringBase = f.ringBase&0xffffffff | uint64(v)<<32
	case abi.RegComplBaseLo:
		f.complBase = f.complBase&^0xffffffff | uint64(v)
	case abi.RegComplBaseHi:
		f.complBase = f.complBase&0xffffffff | uint64(v)<<32
	case abi.RegRingSlots:
		f.slots = v
	case abi.RegRingCtrl:
		if v&abi.RingCtrlReset != 0 {
			if f.lost {
				f.lost, f.errReg, f.errCount = false, abi.StatusOK, 0
			}
			f.enabled, f.head, f.held = false, 0, false
			f.intStatus, f.intEnable = 0, 0
			f.buffers, f.programs, f.used = map[uint32][]byte{}, map[uint32][]abi.KernelInfo{}, 0
			return
		}
		if v&abi.RingCtrlEnable == 0 {
			f.enabled = false
			return
		}
		if f.slots == 0 || f.slots > abi.MaxRingSlots || f.slots&(f.slots-1) != 0 ||
			f.ringBase%abi.PageSize != 0 || f.complBase%abi.ComplSize != 0 {
			f.fail(abi.StatusRingConfig)
			return
		}
		f.enabled, f.head = true, 0
	case abi.RegRingTail:
		if f.lost {
			f.fail(abi.StatusDeviceLost)
			return
		}
		if !f.enabled {
			f.fail(abi.StatusRingConfig)
			return
		}
		if v-f.head > f.slots {
			f.fail(abi.StatusRingOverflow)
			return
		}
		if f.held {
			f.tail = v
			return
		}
		for f.head != v {
			f.exec(f.head)
			f.head++
		}
	default:
		f.fail(abi.StatusBadAccess)
	}
}

// ram returns guest RAM [gpa, gpa+n), copied out, or ok=false.
func (f *Device) read(gpa uint64, n uint64) ([]byte, bool) {
	out := make([]byte, 0, n)
	for n > 0 {
		p, ok := f.pages[gpa/abi.PageSize]
		if !ok {
			return nil, false
		}
		o := gpa % abi.PageSize
		k := min(n, abi.PageSize-o)
		out = append(out, p[o:o+k]...)
		gpa, n = gpa+k, n-k
	}
	return out, true
}

func (f *Device) write(gpa uint64, b []byte) bool {
	for len(b) > 0 {
		p, ok := f.pages[gpa/abi.PageSize]
		if !ok {
			return false
		}
		o := gpa % abi.PageSize
		k := copy(p[o:], b)
		gpa, b = gpa+uint64(k), b[k:]
	}
	return true
}

func (f *Device) exec(idx uint32) {
	slot := uint64(idx % f.slots)
	rec := abi.Completion{Seq: abi.SeqOf(uint64(idx))}
	raw, ok := f.read(f.ringBase+slot*abi.CommandSize, abi.CommandSize)
	if !ok {
		f.fail(abi.StatusBadAddress)
		return
	}
	c, err := abi.UnmarshalCommand(raw)
	rec.Tag, rec.Opcode = c.Tag, c.Opcode
	if err == nil {
		var p abi.Payload
		if p, err = abi.DecodePayload(&c); err == nil {
			rec.Detail, err = f.run(p)
		}
	}
	rec.Status = abi.StatusOf(err)
	var b [abi.ComplSize]byte
	rec.Marshal(b[:])
	if !f.write(f.complBase+slot*abi.ComplSize, b[:]) {
		f.fail(abi.StatusBadAddress)
		return
	}
	if f.cfg.INTx {
		was := f.intStatus&f.intEnable != 0
		f.intStatus |= abi.IntCompletion
		f.updateLine(was)
	}
}

// updateLine raises the line when the level rose (was: it was high).
func (f *Device) updateLine(was bool) {
	if was || f.intStatus&f.intEnable == 0 {
		return
	}
	select {
	case f.irq <- struct{}{}:
	default: // a rise not yet taken: one is enough
	}
}

// Line returns the fake's INTx as a driver.IRQLine: Await returns at the
// line's next rise. It exists only with Config.INTx.
func (f *Device) Line() driver.IRQLine { return &fakeLine{irq: f.irq, closed: make(chan struct{})} }

type fakeLine struct {
	irq    chan struct{}
	once   sync.Once
	closed chan struct{}
}

func (l *fakeLine) Await(deadline time.Time) (bool, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-l.irq:
		return true, nil
	case <-t.C:
		return false, nil
	case <-l.closed:
		return false, driver.ErrClosed
	}
}

func (l *fakeLine) Unmask() error { return nil }

func (l *fakeLine) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// sg resolves a scatter-gather list into data ranges.
func (f *Device) sg(addr uint64, count uint32, length uint64) ([][2]uint64, error) {
	var out [][2]uint64
	var total, seen uint64
	for count > 0 {
		tbl, ok := f.read(addr, uint64(count)*abi.SGEntrySize)
		if !ok || addr/abi.PageSize != (addr+uint64(count)*abi.SGEntrySize-1)/abi.PageSize {
			return nil, abi.Errorf(abi.StatusBadAddress, "sg table at %#x", addr)
		}
		next := uint32(0)
		for i := uint32(0); i < count; i++ {
			if seen++; seen > abi.MaxSGEntries {
				return nil, abi.Errorf(abi.StatusInvalidArgument, "sg list too long")
			}
			e, err := abi.UnmarshalSGEntry(tbl[i*abi.SGEntrySize:])
			if err != nil {
				return nil, err
			}
			if e.Flags&abi.SGChain != 0 {
				if i != count-1 {
					return nil, abi.Errorf(abi.StatusInvalidArgument, "chain entry not last")
				}
				addr, next = e.Addr, e.Len
				continue
			}
			if _, ok := f.read(e.Addr, uint64(e.Len)); !ok {
				return nil, abi.Errorf(abi.StatusBadAddress, "sg data at %#x+%d", e.Addr, e.Len)
			}
			out = append(out, [2]uint64{e.Addr, uint64(e.Len)})
			total += uint64(e.Len)
		}
		count = next
	}
	if total != length {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "sg list of %d bytes, length %d", total, length)
	}
	return out, nil
}

func (f *Device) gather(addr uint64, count uint32, length uint64) ([]byte, error) {
	rs, err := f.sg(addr, count, length)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, r := range rs {
		b, _ := f.read(r[0], r[1])
		out = append(out, b...)
	}
	return out, nil
}

var kernelRE = regexp.MustCompile(`__kernel\s+void\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(([^)]*)\)?`)

// scanKernels finds the kernels of src with their parameters, roughly as a
// compiler with -cl-kernel-arg-info reports them: qualifiers from the
// keywords, the type without them ("float*"), the last word as the name.
func (f *Device) scanKernels(src string) []abi.KernelInfo {
	ks := []abi.KernelInfo{}
	for _, m := range kernelRE.FindAllStringSubmatch(src, -1) {
		k := abi.KernelInfo{Name: m[1], WorkGroupSize: uint64(f.cfg.MaxWorkGroup), PreferredMultiple: 1}
		for _, param := range strings.Split(m[2], ",") {
			words := strings.Fields(strings.ReplaceAll(param, "*", " * "))
			if len(words) == 0 || len(words) == 1 && words[0] == "void" {
				continue
			}
			a := abi.KernelArgInfo{AddressQualifier: abi.ArgAddressPrivate, AccessQualifier: abi.ArgAccessNone}
			var typ []string
			for _, w := range words[:len(words)-1] {
				switch strings.TrimPrefix(w, "__") {
				case "global":
					a.AddressQualifier = abi.ArgAddressGlobal
				case "local":
					a.AddressQualifier = abi.ArgAddressLocal
				case "constant":
					a.AddressQualifier = abi.ArgAddressConstant
				case "private":
					a.AddressQualifier = abi.ArgAddressPrivate
				case "const":
					a.TypeQualifier |= abi.ArgTypeConst
				case "restrict":
					a.TypeQualifier |= abi.ArgTypeRestrict
				case "volatile":
					a.TypeQualifier |= abi.ArgTypeVolatile
				default:
					typ = append(typ, w)
				}
			}
			a.Name = abi.TruncInfoString(words[len(words)-1])
			a.TypeName = abi.TruncInfoString(strings.ReplaceAll(strings.Join(typ, " "), " *", "*"))
			k.Args = append(k.Args, a)
		}
		if i := slices.IndexFunc(ks, func(o abi.KernelInfo) bool { return o.Name == k.Name }); i >= 0 {
			ks[i] = k // a redefinition; a compiler would refuse it
			continue
		}
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b abi.KernelInfo) int { return strings.Compare(a.Name, b.Name) })
	return ks
}

// run executes one command and returns its completion's Detail (bytes moved,
// a build log's length, a launch's device time) and its error. f.mu is held.
func (f *Device) run(p abi.Payload) (uint64, error) {
	switch p := p.(type) {
	case *abi.Nop:
		return 0, nil
	case *abi.BufferCreate:
		return f.bufferCreate(p)
	case *abi.BufferFree:
		return f.bufferFree(p)
	case *abi.Copy:
		return f.copyGuest(p)
	case *abi.ProgramBuild:
		return f.programBuild(p)
	case *abi.ProgramFree:
		return f.programFree(p)
	case *abi.Launch:
		return f.launch(p)
	case *abi.ProgramInfoQuery:
		return f.programInfo(p)
	case *abi.DeviceInfoQuery:
		return f.deviceInfo(p)
	case *abi.BufferCopy:
		return f.bufferCopy(p)
	case *abi.BufferFill:
		return f.bufferFill(p)
	case *abi.Fence:
		return f.fence(p)
	}
	return 0, abi.Errorf(abi.StatusInvalidOpcode, "%T", p)
}

// bufferCreate runs BufferCreate: a zeroed buffer within the memory
// quota.
func (f *Device) bufferCreate(p *abi.BufferCreate) (uint64, error) {
	switch {
	case f.buffers[p.Handle] != nil:
		return 0, abi.Errorf(abi.StatusExists, "buffer %d", p.Handle)
	case p.Size > f.cfg.MaxAlloc:
		return 0, abi.Errorf(abi.StatusInvalidArgument, "buffer of %d bytes", p.Size)
	case f.used+p.Size > f.cfg.MemSize:
		return 0, abi.Errorf(abi.StatusQuotaExceeded, "buffer of %d bytes", p.Size)
	}
	f.buffers[p.Handle] = make([]byte, p.Size)
	f.used += p.Size
	return 0, nil
}

// bufferFree runs BufferFree.
func (f *Device) bufferFree(p *abi.BufferFree) (uint64, error) {
	b := f.buffers[p.Handle]
	if b == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", p.Handle)
	}
	f.used -= uint64(len(b))
	delete(f.buffers, p.Handle)
	return 0, nil
}

// copyGuest runs Copy: between a buffer and guest memory (the
// scatter-gather list), either way.
func (f *Device) copyGuest(p *abi.Copy) (uint64, error) {
	b := f.buffers[p.Handle]
	if b == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", p.Handle)
	}
	if p.Offset+p.Length > uint64(len(b)) {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "range %d+%d", p.Offset, p.Length)
	}
	rs, err := f.sg(p.SGAddr, p.SGCount, p.Length)
	if err != nil {
		return 0, err
	}
	pos := p.Offset
	for _, r := range rs {
		if p.ToDevice {
			d, _ := f.read(r[0], r[1])
			copy(b[pos:], d)
		} else {
			f.write(r[0], b[pos:pos+r[1]])
		}
		pos += r[1]
	}
	return p.Length, nil
}

// programBuild runs ProgramBuild: a source with a "#error" line fails
// with that line in the log; any other is scanned for its kernels.
func (f *Device) programBuild(p *abi.ProgramBuild) (uint64, error) {
	if f.programs[p.Handle] != nil {
		return 0, abi.Errorf(abi.StatusExists, "program %d", p.Handle)
	}
	src, err := f.gather(p.SrcSGAddr, p.SrcCount, p.SrcLen)
	if err != nil {
		return 0, err
	}
	if i := strings.Index(string(src), "#error"); i >= 0 {
		line, _, _ := strings.Cut(string(src[i+len("#error"):]), "\n")
		log := []byte("<source>: error: " + strings.TrimSpace(line) + "\n")
		log = log[:min(len(log), int(p.LogLen))]
		if !f.write(p.LogAddr, log) {
			return 0, abi.Errorf(abi.StatusBadAddress, "log at %#x", p.LogAddr)
		}
		return uint64(len(log)), abi.Errorf(abi.StatusBuildFailed, "#error")
	}
	f.programs[p.Handle] = f.scanKernels(string(src))
	return 0, nil
}

// programFree runs ProgramFree.
func (f *Device) programFree(p *abi.ProgramFree) (uint64, error) {
	if f.programs[p.Handle] == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "program %d", p.Handle)
	}
	delete(f.programs, p.Handle)
	return 0, nil
}

// launch runs Launch: the registered KernelFunc of a kernel the program
// has, once its buffer arguments are checked.
func (f *Device) launch(p *abi.Launch) (uint64, error) {
	kernels := f.programs[p.Program]
	if kernels == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "program %d", p.Program)
	}
	raw, ok := f.read(p.DescAddr, uint64(p.DescLen))
	if !ok {
		return 0, abi.Errorf(abi.StatusBadAddress, "descriptor at %#x", p.DescAddr)
	}
	d, err := abi.UnmarshalLaunchDesc(raw)
	if err != nil {
		return 0, err
	}
	found := false
	for _, k := range kernels {
		found = found || k.Name == d.Kernel
	}
	k := f.kernels[d.Kernel]
	if !found || k == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "kernel %q", d.Kernel)
	}
	for _, a := range d.Args {
		if a.Kind == abi.ArgBuffer && f.buffers[a.Handle] == nil {
			return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", a.Handle)
		}
	}
	var pb []byte
	if p.Printf != 0 {
		if pb = f.buffers[p.Printf]; pb == nil {
			return 0, abi.Errorf(abi.StatusNotFound, "printf buffer %d", p.Printf)
		}
		if len(pb) < abi.PrintfHeaderSize {
			return 0, abi.Errorf(abi.StatusInvalidArgument, "printf buffer of %d bytes", len(pb))
		}
	}
	if err := k(&d, func(h uint32) []byte { return f.buffers[h] }); err != nil {
		return 0, abi.Errorf(abi.StatusLaunchFailed, "%v", err)
	}
	if pb != nil {
		h := abi.PrintfHeader{}
		if f.cfg.Printout != "" {
			n := copy(pb[abi.PrintfHeaderSize:], f.cfg.Printout)
			h = abi.PrintfHeader{Length: uint64(n), Dropped: uint32(len(f.cfg.Printout) - n), Flags: abi.PrintfCaptured}
		}
		h.Marshal(pb)
	}
	f.Launches++
	return 1000, nil
}

// programInfo runs ProgramInfoQuery (ABI 1.4): the program's scanned
// kernels, written only if they fit; the result is their size.
func (f *Device) programInfo(p *abi.ProgramInfoQuery) (uint64, error) {
	if err := f.need14(p); err != nil {
		return 0, err
	}
	kernels := f.programs[p.Handle]
	if kernels == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "program %d", p.Handle)
	}
	rs, err := f.sg(p.SGAddr, p.SGCount, p.Length)
	if err != nil {
		return 0, err
	}
	info := abi.ProgramInfo{Kernels: kernels}
	blob, err := info.Marshal()
	if err != nil {
		return 0, abi.Errorf(abi.StatusInternal, "program info: %v", err)
	}
	if uint64(len(blob)) <= p.Length {
		f.scatter(rs, blob)
	}
	return info.Size(), nil
}

// deviceInfo runs DeviceInfoQuery (ABI 1.4): Config.DeviceInfo, written
// only if it fits; the result is its size.
func (f *Device) deviceInfo(p *abi.DeviceInfoQuery) (uint64, error) {
	if err := f.need14(p); err != nil {
		return 0, err
	}
	rs, err := f.sg(p.SGAddr, p.SGCount, p.Length)
	if err != nil {
		return 0, err
	}
	blob, err := f.cfg.DeviceInfo.Marshal()
	if err != nil {
		return 0, abi.Errorf(abi.StatusInternal, "device info: %v", err)
	}
	size := uint64(len(blob))
	if size <= p.Length {
		f.scatter(rs, blob)
	}
	return size, nil
}

// scatter writes blob over the guest ranges rs (from sg), in order, until
// it runs out.
func (f *Device) scatter(rs [][2]uint64, blob []byte) {
	for _, r := range rs {
		if len(blob) == 0 {
			break
		}
		n := min(r[1], uint64(len(blob)))
		f.write(r[0], blob[:n])
		blob = blob[n:]
	}
}

// bufferCopy runs BufferCopy (ABI 1.4): between two buffers.
func (f *Device) bufferCopy(p *abi.BufferCopy) (uint64, error) {
	if err := f.need14(p); err != nil {
		return 0, err
	}
	src, dst := f.buffers[p.Src], f.buffers[p.Dst]
	switch {
	case src == nil:
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", p.Src)
	case dst == nil:
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", p.Dst)
	case p.SrcOffset+p.Length > uint64(len(src)):
		return 0, abi.Errorf(abi.StatusInvalidArgument, "source range %d+%d", p.SrcOffset, p.Length)
	case p.DstOffset+p.Length > uint64(len(dst)):
		return 0, abi.Errorf(abi.StatusInvalidArgument, "destination range %d+%d", p.DstOffset, p.Length)
	}
	copy(dst[p.DstOffset:p.DstOffset+p.Length], src[p.SrcOffset:p.SrcOffset+p.Length])
	return p.Length, nil
}

// bufferFill runs BufferFill (ABI 1.4): a pattern from guest memory
// repeated over a range of a buffer.
func (f *Device) bufferFill(p *abi.BufferFill) (uint64, error) {
	if err := f.need14(p); err != nil {
		return 0, err
	}
	b := f.buffers[p.Handle]
	if b == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", p.Handle)
	}
	if p.Offset+p.Length > uint64(len(b)) {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "range %d+%d", p.Offset, p.Length)
	}
	pat, ok := f.read(p.PatternAddr, uint64(p.PatternLen))
	if !ok {
		return 0, abi.Errorf(abi.StatusBadAddress, "pattern at %#x", p.PatternAddr)
	}
	for o := p.Offset; o < p.Offset+p.Length; o += uint64(len(pat)) {
		copy(b[o:], pat)
	}
	return p.Length, nil
}

// fence runs Fence: its value written, little-endian, to guest memory.
func (f *Device) fence(p *abi.Fence) (uint64, error) {
	var b [8]byte
	le.PutUint64(b[:], p.Value)
	if !f.write(p.Addr, b[:]) {
		return 0, abi.Errorf(abi.StatusBadAddress, "fence at %#x", p.Addr)
	}
	return 0, nil
}

// need14 refuses an ABI 1.4 command on a fake configured as an older device.
func (f *Device) need14(p abi.Payload) error {
	if f.cfg.Version&0xffff < 4 {
		return abi.Errorf(abi.StatusInvalidOpcode, "%v on an abi %d.%d device", p.Op(), f.cfg.Version>>16, f.cfg.Version&0xffff)
	}
	return nil
}
