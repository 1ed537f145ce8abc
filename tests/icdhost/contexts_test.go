package main

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/icdproto"
	"github.com/vgpud/vgpud/guestagent/icdserver"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
)

// scanSrc searches the memory of the process it runs in for two 8-byte
// words given as their scanHash (so that neither its buffers nor its
// registers ever hold the words themselves: a kernel that computed them
// would find its own copy on a stack it scans): work item i scans range i
// of ranges, (start, length) pairs.
const scanSrc = `ulong mix(ulong v, ulong mask) { v ^= mask; v ^= v >> 29; return v * 0xbf58476d1ce4e5b9UL; }
__kernel void scan(__global const ulong *ranges, __global const ulong *needles, ulong mask,
		__global volatile uint *nhits) {
	size_t i = get_global_id(0);
	ulong a = needles[0], b = needles[1];
	__global const ulong *p = (__global const ulong *)ranges[2*i];
	ulong n = ranges[2*i+1] / 8;
	for (ulong j = 0; j < n; j++) {
		ulong h = mix(p[j], mask);
		if (h == a || h == b) atomic_inc(nhits);
	}
}`

// scanHash is scanSrc's mix: what it compares each word's hash with.
func scanHash(v, mask uint64) uint64 {
	v ^= mask
	v ^= v >> 29
	return v * 0xbf58476d1ce4e5b9
}

// TestClientsHaveTheirOwnContexts (issue 31) plays two processes of one
// VM through vgpu-icdd's server: the attacker's pointer-casting kernel
// scans every readable page of the process it runs in for the victim's
// secret and for the daemon's guest RAM and finds neither (the victim's
// own scan finds its secret: the scan sees what it looks for); the
// attacker's wild-pointer kernel then ends its own context while the
// victim's job runs to a correct result.
func TestClientsHaveTheirOwnContexts(t *testing.T) {
	h := newICDHost(t, hostOptions{RAM: 256 << 20, Policy: icdserver.ContextsRequire, Wait: time.Minute, Deadline: 8 * time.Minute})
	worker := h.inst.WorkerPID()

	before := addrspacetest.Children(worker)
	victim := connect(t, h.srv, h.deadline)
	victim.build(1, vaddSrc) // its context is made at its first device request
	victimExec := addrspacetest.NewPIDs(before, addrspacetest.Children(worker))
	secret := make([]byte, 4096)
	copy(secret, "ICD-VICTIM-SECRET")
	rand.Read(secret[17:])
	copy(victim.arena[8192:], secret)
	victim.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 9, Size: 4096, Event: 1})
	victim.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: 9, Arena: 1, ArenaOffset: 8192, Length: 4096, Event: 2})
	mustOK(t, victim.wait(1, 2))

	mid := addrspacetest.Children(worker)
	attacker := connect(t, h.srv, h.deadline)
	attacker.build(2, scanSrc)
	attackerExec := addrspacetest.NewPIDs(mid, addrspacetest.Children(worker))
	if len(victimExec) != 1 || len(attackerExec) != 1 {
		t.Fatalf("executors made for the victim %v and the attacker %v: want one each", victimExec, attackerExec)
	}
	victim.build(2, scanSrc)

	// The daemon's staging pages hold the secret on its way to the
	// device; the guest RAM marker is their first word.
	mask := uint64(0x5a5a_a5a5_0ff0_f00f)
	needles := make([]byte, 16)
	// Words of the random part: the text prefix is in this binary's own
	// data, which an executor (this binary, re-executed) holds too.
	binary.LittleEndian.PutUint64(needles[0:], scanHash(binary.LittleEndian.Uint64(secret[24:]), mask))
	binary.LittleEndian.PutUint64(needles[8:], scanHash(binary.LittleEndian.Uint64(secret[32:]), mask))
	if n, bytes := scanAs(t, victim, victimExec[0], needles, mask, 100); n == 0 {
		t.Fatalf("the victim's own scan (%d bytes) did not find its secret: the scan proves nothing", bytes)
	}
	if n, bytes := scanAs(t, attacker, attackerExec[0], needles, mask, 100); n != 0 {
		t.Errorf("the attacker's kernel found the victim's secret %d times in the %d readable bytes of its process", n, bytes)
	} else {
		t.Logf("the attacker's kernel scanned %d readable bytes of its process: no trace of the victim's secret", bytes)
	}

	// The victim computes while the attacker's wild pointer ends the
	// attacker's context.
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 8 {
			victim.vadd(uint32(20+2*i), uint32(21+2*i), uint32(i), uint64(1000+10*i))
		}
	})
	attacker.build(3, `__kernel void wild(__global int *o) { *(__global int *)0x10 = 1; o[0] = 2; }`)
	attacker.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 7, Size: 64, Event: 300})
	wl := &icdproto.Launch{LaunchHead: icdproto.LaunchHead{Program: 3, WorkDim: 1, GlobalSize: [3]uint64{1}, Event: 301},
		Args: []icdproto.LaunchArg{{Kind: abi.ArgBuffer, Value: 7}}}
	wl.SetKernel("wild")
	attacker.send(icdproto.OpLaunch, wl)
	if r := attacker.wait(301); r[0].Status != uint32(abi.StatusDeviceLost) {
		t.Errorf("the wild write: status %v, want its context lost (StatusDeviceLost)", abi.Status(r[0].Status))
	}
	wg.Wait()
	if h.inst.WorkerPID() != worker {
		t.Errorf("the worker changed (%d -> %d): one client's crash ended more than its context", worker, h.inst.WorkerPID())
	}
	victim.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 9, Arena: 1, ArenaOffset: 8192, Length: 4096, Event: 400})
	mustOK(t, victim.wait(400))
	if string(victim.arena[8192:8192+4096]) != string(secret) {
		t.Errorf("the victim's buffer changed")
	}
}

// TestSixtyFourClients (issue 31): 64 clients, each with a device context
// of its own (an executor each), compute at once, each to its own correct
// result.
func TestSixtyFourClients(t *testing.T) {
	h := newICDHost(t, hostOptions{RAM: 256 << 20, Policy: icdserver.ContextsRequire, Wait: time.Minute, Deadline: 8 * time.Minute})
	worker := h.inst.WorkerPID()
	before := addrspacetest.Children(worker)
	clients := make([]*icdClient, abi.MaxContexts)
	for i := range clients {
		clients[i] = connect(t, h.srv, h.deadline)
		clients[i].build(1, vaddSrc)
	}
	if got := len(addrspacetest.NewPIDs(before, addrspacetest.Children(worker))); got != len(clients) {
		t.Errorf("%d executors for %d clients' contexts, want one each", got, len(clients))
	}
	// A 65th client finds no context left and is refused (the policy
	// requires one).
	extra := connect(t, h.srv, h.deadline)
	extra.send(icdproto.OpBuild, &icdproto.Build{Program: 1, Arena: 1, SrcLen: 1})
	if e, ok := extra.reply().(*icdproto.Error); !ok || e.Code != icdproto.ErrLimit {
		t.Errorf("the 65th client's first request: %+v, want ErrLimit", e)
	}
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Go(func() { cl.vadd(2, 3, uint32(i), 10) })
	}
	wg.Wait()
	// A client that leaves frees its context for the next one.
	clients[0].c.Close()
	for {
		next := connect(t, h.srv, h.deadline)
		next.send(icdproto.OpBuild, &icdproto.Build{Program: 1, Arena: 1, SrcLen: uint32(copy(next.arena, vaddSrc)), OutOffset: 1 << 19, OutCap: 1 << 16})
		if _, ok := next.reply().(*icdproto.BuildReply); ok {
			next.vadd(2, 3, 99, 10)
			break
		}
		if time.Now().After(h.deadline) {
			t.Fatal("no context came free after a client left")
		}
		next.c.Close()
	}
}

func mustOK(t *testing.T, recs []icdproto.EventRecord) {
	t.Helper()
	for _, r := range recs {
		if r.Status != 0 {
			t.Fatalf("event %d: status %v", r.Event, abi.Status(r.Status))
		}
	}
}

// reply reads one message (reply or error) without failing on an error.
func (cl *icdClient) reply() any {
	cl.t.Helper()
	buf := make([]byte, icdproto.MaxMessage)
	cl.c.SetReadDeadline(cl.deadline)
	n, err := cl.c.Read(buf)
	if err != nil {
		cl.t.Fatalf("no reply: %v", err)
	}
	_, r, err := icdproto.Unmarshal(buf[:n])
	if err != nil {
		cl.t.Fatal(err)
	}
	return r
}

// scanAs runs scanSrc (built as program 2) in cl's context over every
// readable mapping of process pid, with buffers from id base on, and
// returns the hits and the bytes scanned.
func scanAs(t *testing.T, cl *icdClient, pid int, needles []byte, mask uint64, base uint32) (uint32, uint64) {
	t.Helper()
	ranges, total := addrspacetest.ReadableRanges(t, pid)
	if len(ranges) > 1<<19-16384 {
		t.Fatalf("/proc/%d/maps: %d bytes of ranges, more than the arena holds", pid, len(ranges))
	}
	copy(cl.arena[16384:], ranges)
	copy(cl.arena[12288:], needles)
	clear(cl.arena[12304:12308])
	ev := uint64(base) * 10
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: base, Size: uint64(len(ranges)), Event: ev})
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: base + 1, Size: 16, Event: ev + 1})
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: base + 2, Size: 4, Event: ev + 2})
	cl.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: base, Arena: 1, ArenaOffset: 16384, Length: uint64(len(ranges)), Event: ev + 3})
	cl.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: base + 1, Arena: 1, ArenaOffset: 12288, Length: 16, Event: ev + 4})
	cl.send(icdproto.OpWrite, &icdproto.Transfer{Buffer: base + 2, Arena: 1, ArenaOffset: 12304, Length: 4, Event: ev + 5})
	l := &icdproto.Launch{LaunchHead: icdproto.LaunchHead{Program: 2, WorkDim: 1, GlobalSize: [3]uint64{uint64(len(ranges) / 16)}, LocalSize: [3]uint64{1}, Event: ev + 6},
		Args: []icdproto.LaunchArg{{Kind: abi.ArgBuffer, Value: uint64(base)}, {Kind: abi.ArgBuffer, Value: uint64(base + 1)},
			{Kind: abi.ArgScalar, Size: 8, Value: mask}, {Kind: abi.ArgBuffer, Value: uint64(base + 2)}}}
	l.SetKernel("scan")
	cl.send(icdproto.OpLaunch, l)
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: base + 2, Arena: 1, ArenaOffset: 12304, Length: 4, Event: ev + 7})
	mustOK(t, cl.wait(ev, ev+1, ev+2, ev+3, ev+4, ev+5, ev+6, ev+7))
	return binary.LittleEndian.Uint32(cl.arena[12304:]), total
}
