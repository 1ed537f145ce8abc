package aggregator

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/vgpud/vgpud/abi"
)

const vaddSrc = `__kernel void vadd(__global const float *a, __global const float *b, __global float *c, float k) {
	size_t i = get_global_id(0);
	c[i] = a[i] + k * b[i];
}`

func vaddInputs(n int) (a, b []float32) {
	a, b = make([]float32, n), make([]float32, n)
	for i := range a {
		a[i] = float32(i)
		b[i] = float32(2*i + 1)
	}
	return a, b
}

// vaddJob runs c = a + 2b on g with buffer handles 1-3 and program 1 and
// checks the result.
func vaddJob(t *testing.T, g *testGuest, n int) {
	t.Helper()
	a, b := vaddInputs(n)
	size := uint64(4 * n)
	buildCmd, _ := g.build(1, vaddSrc, 0)
	dl, read := g.download(3, 4*n)
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: size, Flags: abi.BufferReadOnly}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: size, Flags: abi.BufferReadOnly}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 3, Size: size}, 0, 0),
		g.upload(1, floatBytes(a)),
		g.upload(2, floatBytes(b)),
		buildCmd,
		g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{uint64(n)}, Kernel: "vadd", Args: []abi.KernelArg{
			{Kind: abi.ArgBuffer, Handle: 1}, {Kind: abi.ArgBuffer, Handle: 2}, {Kind: abi.ArgBuffer, Handle: 3},
			{Kind: abi.ArgScalar, Bytes: floatBytes([]float32{2})}}}),
		dl,
		abi.NewCommand(&abi.Fence{Addr: fenceAddr, Value: 77}, 0, 0),
	)...)
	got := floats(read())
	for i := range got {
		if want := a[i] + 2*b[i]; got[i] != want {
			t.Fatalf("c[%d] = %v, want %v", i, got[i], want)
		}
	}
	if v := g.mem.load64(fenceAddr); v != 77 {
		t.Errorf("fence value = %d, want 77", v)
	}
}

// vaddFree frees what vaddJob created.
func vaddFree(g *testGuest) {
	g.t.Helper()
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferFree{Handle: 1}, 0, 0),
		abi.NewCommand(&abi.BufferFree{Handle: 2}, 0, 0),
		abi.NewCommand(&abi.BufferFree{Handle: 3}, 0, 0),
		abi.NewCommand(&abi.ProgramFree{Handle: 1}, 0, 0))...)
}

func TestVectorAdd(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	vaddJob(t, g, 3000) // 12000 bytes: 3 pages, the last one partial
	st := g.in.Stats()
	if st.Launches.Load() != 1 || st.BytesToDev.Load() != 24000 || st.BytesFromDev.Load() != 12000 {
		t.Errorf("stats = launches %d, to %d, from %d", st.Launches.Load(), st.BytesToDev.Load(), st.BytesFromDev.Load())
	}
	if g.in.MemUsed() != 36000 {
		t.Errorf("MemUsed() = %d, want 36000", g.in.MemUsed())
	}
}

func TestHandlersCoverEveryOpcode(t *testing.T) {
	for op := abi.Opcode(0); int(op) < abi.NumOpcodes; op++ {
		if handlers[op] == nil {
			t.Errorf("opcode %v has no handler", op)
		}
	}
}

// TestHostileCommands sends bad commands and checks that each gets its
// status, that the instance keeps working, and that another instance on
// the same device is untouched.
func TestHostileCommands(t *testing.T) {
	d, _ := newDevice(t)
	bad := newTestGuest(t, d, "hostile", 1<<20)
	good := newTestGuest(t, d, "good", 64<<20)
	vaddJob(t, good, 1024)

	buildCmd, _ := bad.build(9, vaddSrc, 0)
	bad.mustOK(bad.run(
		abi.NewCommand(&abi.BufferCreate{Handle: 5, Size: 4096}, 0, 0),
		buildCmd)...)
	outside := abi.SGEntry{Addr: 1 << 46, Len: 4096}
	outTable := bad.alloc(abi.PageSize)
	var eb [abi.SGEntrySize]byte
	outside.Marshal(eb[:])
	bad.put(outTable, eb[:])
	loop := bad.alloc(abi.PageSize) // a chain that points at itself
	(&abi.SGEntry{Addr: loop, Len: 1, Flags: abi.SGChain}).Marshal(eb[:])
	bad.put(loop, eb[:])
	badSrc, logAddr := bad.build(10, "__kernel void k(__global float *x) { x[0] = undefined_thing; }", 4096)
	incl, _ := bad.build(11, "#include \"/etc/passwd\"\n__kernel void k() {}", 0)
	hidden, _ := bad.build(12, "#/**/include </etc/shadow>\n__kernel void k() {}", 0)
	garbage := abi.Command{Opcode: 0x7777, Tag: 1}

	tests := []struct {
		name string
		cmd  abi.Command
		want abi.Status
	}{
		{"address outside guest RAM", abi.NewCommand(&abi.Copy{ToDevice: true, Handle: 5, SGCount: 1, Length: 4096, SGAddr: outTable}, 0, 0), abi.StatusBadAddress},
		{"sg table outside guest RAM", abi.NewCommand(&abi.Copy{ToDevice: true, Handle: 5, SGCount: 1, Length: 4096, SGAddr: 1 << 40}, 0, 0), abi.StatusBadAddress},
		{"sg chain loop", abi.NewCommand(&abi.Copy{ToDevice: true, Handle: 5, SGCount: 1, Length: 4096, SGAddr: loop}, 0, 0), abi.StatusInvalidArgument},
		{"other instance's handle", abi.NewCommand(&abi.BufferFree{Handle: 3}, 0, 0), abi.StatusNotFound},
		{"copy past buffer end", bad.upload(5, make([]byte, 8192)), abi.StatusInvalidArgument},
		{"over quota", abi.NewCommand(&abi.BufferCreate{Handle: 6, Size: 2 << 20}, 0, 0), abi.StatusQuotaExceeded},
		{"handle reused", abi.NewCommand(&abi.BufferCreate{Handle: 5, Size: 16}, 0, 0), abi.StatusExists},
		{"garbage opcode", garbage, abi.StatusInvalidOpcode},
		{"build failure", badSrc, abi.StatusBuildFailed},
		{"include", incl, abi.StatusBuildFailed},
		{"include hidden by comment", hidden, abi.StatusBuildFailed},
		{"unknown kernel", bad.launch(9, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{1}, Kernel: "nope"}), abi.StatusNotFound},
		{"wrong argument count", bad.launch(9, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{1}, Kernel: "vadd"}), abi.StatusInvalidArgument},
		{"launch with foreign buffer", bad.launch(9, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{1}, Kernel: "vadd", Args: []abi.KernelArg{
			{Kind: abi.ArgBuffer, Handle: 5}, {Kind: abi.ArgBuffer, Handle: 1}, {Kind: abi.ArgBuffer, Handle: 5}, {Kind: abi.ArgScalar, Bytes: make([]byte, 4)}}}), abi.StatusNotFound},
		{"huge launch", bad.launch(9, abi.LaunchDesc{WorkDim: 2, GlobalSize: [3]uint64{1 << 20, 1 << 20}, Kernel: "vadd"}), abi.StatusInvalidArgument},
		{"fence outside RAM", abi.NewCommand(&abi.Fence{Addr: 1 << 40, Value: 1}, 0, 0), abi.StatusBadAddress},
		{"nondeterministic flag on free", abi.NewCommand(&abi.BufferFree{Handle: 5}, abi.FlagNondeterministic, 0), abi.StatusInvalidArgument},
	}
	for _, tt := range tests {
		rec := bad.run(tt.cmd)[0]
		if rec.Status != tt.want {
			t.Errorf("%s: status = %v, want %v", tt.name, rec.Status, tt.want)
		}
	}
	log := bad.get(logAddr, 4096)
	if !bytes.Contains(log, []byte("undefined_thing")) {
		t.Errorf("build log = %q, want it to name undefined_thing", bytes.TrimRight(log, "\x00"))
	}
	if err := bad.in.Doorbell(bad.tail + slots + 5); abi.StatusOf(err) != abi.StatusRingOverflow {
		t.Errorf("Doorbell(beyond ring) = %v, want ring overflow", err)
	}
	// Still serving both.
	bad.mustOK(bad.run(abi.NewCommand(&abi.BufferFree{Handle: 5}, 0, 0))...)
	vaddFree(good)
	vaddJob(t, good, 4096)
}

func TestDoorbellRules(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 1<<20)
	g.mustOK(g.run(abi.Command{}, abi.Command{})...)
	tests := []struct {
		tail uint32
		want abi.Status
	}{
		{g.tail + slots + 1, abi.StatusRingOverflow},
		{g.tail - 1, abi.StatusRingOverflow}, // backwards
		{g.tail, abi.StatusOK},
		{g.tail + slots, abi.StatusOK}, // exactly a full ring of nops
	}
	for _, tt := range tests {
		if err := g.in.Doorbell(tt.tail); abi.StatusOf(err) != tt.want {
			t.Errorf("Doorbell(%d) = %v, want %v", tt.tail, err, tt.want)
		}
	}
	g.tail += slots
	g.wait(g.tail - 1)
	g.in.DisableRing()
	if err := g.in.Doorbell(g.tail + 1); abi.StatusOf(err) != abi.StatusRingConfig {
		t.Errorf("Doorbell(disabled) = %v, want ring config error", err)
	}
	for _, cfg := range []RingConfig{
		{Base: ringBase, ComplBase: complBase, Slots: 3},
		{Base: ringBase, ComplBase: complBase, Slots: 8192},
		{Base: ringBase + 8, ComplBase: complBase, Slots: 4},
		{Base: ringBase, ComplBase: ringBase, Slots: 4},
		{Base: ramSize - 64, ComplBase: complBase, Slots: 4},
	} {
		if err := g.in.EnableRing(cfg); abi.StatusOf(err) != abi.StatusRingConfig {
			t.Errorf("EnableRing(%+v) = %v, want ring config error", cfg, err)
		}
	}
}

func TestResetFreesEverything(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	vaddJob(t, g, 256)
	g.in.Reset()
	if err := g.in.EnableRing(RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots}); err != nil {
		t.Fatal(err)
	}
	g.tail = 0
	g.put(complBase, make([]byte, slots*abi.ComplSize)) // a driver clears old records on re-init
	// The handles are free again: the same job runs from scratch.
	vaddJob(t, g, 256)
}

func TestCompletionOrder(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	var cmds []abi.Command
	for i := 0; i < 40; i++ {
		cmds = append(cmds, abi.NewCommand(&abi.BufferCreate{Handle: uint32(i + 1), Size: 4096}, 0, uint64(i)))
	}
	first := g.submit(cmds...)
	for i := range cmds {
		if got := <-g.dones; got != first+uint32(i) {
			t.Fatalf("completion %d is for command %d", i, got)
		}
	}
	for i := range cmds {
		if r := g.wait(first + uint32(i)); r.Tag != uint64(i) || r.Status != abi.StatusOK {
			t.Errorf("record %d = %+v", i, r)
		}
	}
}

func TestTwoInstancesConcurrently(t *testing.T) {
	d, _ := newDevice(t)
	t.Run("group", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			t.Run(fmt.Sprintf("vm%d", i), func(t *testing.T) {
				t.Parallel()
				g := newTestGuest(t, d, fmt.Sprintf("vm%d", i), 64<<20)
				for j := 0; j < 3; j++ {
					vaddJob(t, g, 2048)
					vaddFree(g)
				}
			})
		}
	})
	if n := d.Instances(); n != 0 {
		t.Errorf("Instances() after close = %d, want 0", n)
	}
}

func FuzzWalkSG(f *testing.F) {
	f.Add(make([]byte, 64), uint32(1), uint64(16))
	f.Fuzz(func(t *testing.T, table []byte, count uint32, length uint64) {
		mem := &sliceMemory{ram: make([]byte, 3*abi.PageSize)}
		copy(mem.ram, table)
		segs, err := walkSG(mem, 0, count, length)
		if err != nil {
			if segs != nil {
				t.Fatal("segments with an error")
			}
			return
		}
		total := uint64(0)
		for _, s := range segs {
			total += s.len
		}
		if total != length {
			t.Fatalf("segments add to %d, want %d", total, length)
		}
	})
}

func TestSetProfile(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 1<<20)
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 600 << 10}, 0, 0))...)
	if err := g.in.SetProfile("smaller", 512<<10); abi.StatusOf(err) != abi.StatusBusy {
		t.Errorf("SetProfile(below use) = %v, want busy", err)
	}
	if got := g.in.Limits().MemBytes; got != 1<<20 {
		t.Errorf("quota after a refused change = %d", got)
	}
	if r := g.run(abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 600 << 10}, 0, 0))[0]; r.Status != abi.StatusQuotaExceeded {
		t.Errorf("over the old quota: %v", r.Status)
	}
	if err := g.in.SetProfile("bigger", 2<<20); err != nil {
		t.Fatal(err)
	}
	if l := g.in.Limits(); l.MemBytes != 2<<20 || l.MaxAlloc > 2<<20 || l.Profile != "bigger" {
		t.Errorf("Limits() after raise = %+v", l)
	}
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 600 << 10}, 0, 0))...)
	if used := g.in.MemUsed(); used != 1200<<10 {
		t.Errorf("MemUsed() = %d", used)
	}
}

// TestProgramQuota: programs count against the instance's program quota
// (source and options, then the built binary); a build over it is refused
// with StatusQuotaExceeded and charges nothing; freeing gives the bytes
// back; the quota cannot be lowered below what the instance holds.
func TestProgramQuota(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 1<<20)
	const src = `__kernel void k(__global int *a) { a[get_global_id(0)] = 1; }`
	if err := g.in.SetProgramBytes(uint64(len(src)) + 16); err != nil {
		t.Fatal(err)
	}
	c, _ := g.build(1, src, 0)
	if r := g.run(c)[0]; r.Status != abi.StatusQuotaExceeded {
		t.Errorf("build whose binary exceeds the quota: %v, want %v", r.Status, abi.StatusQuotaExceeded)
	}
	if n := g.in.Shared().ProgramBytes.Load(); n != 0 {
		t.Errorf("a refused build left %d bytes charged", n)
	}
	if err := g.in.SetProgramBytes(64 << 20); err != nil {
		t.Fatal(err)
	}
	c, _ = g.build(1, src, 0)
	g.mustOK(g.run(c)...)
	held := g.in.Shared().ProgramBytes.Load()
	if held <= uint64(len(src)) {
		t.Errorf("a built program charged %d bytes, want its source and its binary", held)
	}
	if err := g.in.SetProgramBytes(held - 1); abi.StatusOf(err) != abi.StatusBusy {
		t.Errorf("SetProgramBytes(below use) = %v, want busy", err)
	}
	g.mustOK(g.run(abi.NewCommand(&abi.ProgramFree{Handle: 1}, 0, 0))...)
	if n := g.in.Shared().ProgramBytes.Load(); n != 0 {
		t.Errorf("after the free: %d bytes charged", n)
	}
}
