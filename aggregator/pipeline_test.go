package aggregator

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

// chainSource's tick makes every launch depend on the one before it, so
// a result computed out of order, or read before the launches ended,
// is wrong.
const chainSource = `
__kernel void tick(__global uint *a, uint k) {
	size_t i = get_global_id(0);
	a[i] = a[i] * 3u + k + (uint)i;
}`

// chained is a[i] after launches of tick with k = 0..n-1 on zeros.
func chained(i, n int) uint32 {
	v := uint32(0)
	for k := 0; k < n; k++ {
		v = v*3 + uint32(k) + uint32(i)
	}
	return v
}

// countingQueue counts a queue's launches and syncs, and fails the
// outcome of the enqueued launches whose index (from 0) is in failAt.
type countingQueue struct {
	gpu.Queue
	mu                       sync.Mutex
	launches, enqueues, sync int
	failAt                   map[int]bool
}

func (q *countingQueue) Launch(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	q.mu.Lock()
	q.launches++
	q.mu.Unlock()
	return q.Queue.Launch(k, r, args)
}

func (q *countingQueue) Enqueue(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) error {
	q.mu.Lock()
	q.enqueues++
	q.mu.Unlock()
	return q.Queue.(gpu.Pipeliner).Enqueue(k, r, args)
}

func (q *countingQueue) Sync() []gpu.LaunchResult {
	res := q.Queue.(gpu.Pipeliner).Sync()
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range res {
		if q.failAt[q.enqueues-len(res)+i] {
			res[i] = gpu.LaunchResult{Err: fmt.Errorf("injected: %w", gpu.ErrDevice)}
		}
	}
	q.sync++
	return res
}

func (q *countingQueue) counts() (launches, enqueues, syncs int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.launches, q.enqueues, q.sync
}

// chainGuest builds chainSource as program 1 and a zeroed buffer 1 of n
// uints, and wraps the instance's queue in a countingQueue. With reuse,
// the instance has a private reuse domain from the start.
func chainGuest(t *testing.T, n int, hold time.Duration, withReuse bool) (*testGuest, *countingQueue) {
	t.Helper()
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	if withReuse {
		g.in.SetReuseDomain(reuse.New(reuse.Config{}).Private(g.in.ID()))
	}
	b, _ := g.build(1, chainSource, 0)
	g.mustOK(g.run(b, abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: uint64(4 * n)}, 0, 0))...)
	// The worker is idle: the test may swap its queue and hold.
	q := &countingQueue{Queue: g.in.queue, failAt: map[int]bool{}}
	g.in.queue, g.in.hold = q, hold
	return g, q
}

func (g *testGuest) tick(n int, k uint32) abi.Command {
	return g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{uint64(n)}, Kernel: "tick",
		Args: []abi.KernelArg{{Kind: abi.ArgBuffer, Handle: 1}, {Kind: abi.ArgScalar, Bytes: u32(k)}}})
}

// ticks is n launches of tick over items, k = 0..n-1, with room for one
// command more.
func (g *testGuest) ticks(items, n int) []abi.Command {
	cmds := make([]abi.Command, 0, n+1)
	for k := 0; k < n; k++ {
		cmds = append(cmds, g.tick(items, uint32(k)))
	}
	return cmds
}

// TestPipelinedLaunches: launches the guest queued together are enqueued
// behind each other and waited for together (one Sync per run of at most
// maxPipelined, none waited for alone), complete in ring order with their
// device time, and a copy after them sees every one's result.
func TestPipelinedLaunches(t *testing.T) {
	const items = 64
	for _, n := range []int{1, 10, slots - 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g, q := chainGuest(t, items, time.Hour, false)
			cmds := g.ticks(items, n)
			dl, read := g.download(1, 4*items)
			cmds = append(cmds, dl)
			recs := g.run(cmds...)
			g.mustOK(recs...)
			for i, r := range recs[:n] {
				if r.Opcode != abi.OpLaunch || r.Seq != recs[0].Seq+uint64(i) {
					t.Fatalf("record %d: %v seq %d", i, r.Opcode, r.Seq)
				}
			}
			got := read()
			for i := 0; i < items; i++ {
				if v := binary.LittleEndian.Uint32(got[4*i:]); v != chained(i, n) {
					t.Fatalf("a[%d] = %d after %d launches, want %d", i, v, n, chained(i, n))
				}
			}
			launches, enqueues, syncs := q.counts()
			if launches != 0 || enqueues != n {
				t.Errorf("%d launches: %d waited for alone, %d enqueued; want 0 and %d", n, launches, enqueues, n)
			}
			if want := (n + maxPipelined - 1) / maxPipelined; syncs != want {
				t.Errorf("%d launches were synced %d times, want %d", n, syncs, want)
			}
			if got := g.in.sh.Stats.Launches.Load(); got != uint64(n) {
				t.Errorf("Stats.Launches = %d, want %d", got, n)
			}
		})
	}
}

// TestPipelinedLaunchFails: a launch that fails when its batch is
// waited for completes with its error status, in place; the launches
// around it complete ok.
func TestPipelinedLaunchFails(t *testing.T) {
	g, q := chainGuest(t, 64, time.Hour, false)
	q.failAt[2] = true
	recs := g.run(g.tick(64, 0), g.tick(64, 1), g.tick(64, 2), g.tick(64, 3))
	for i, r := range recs {
		want := abi.StatusOK
		if i == 2 {
			want = abi.StatusDeviceError
		}
		if r.Status != want {
			t.Errorf("launch %d: status %v, want %v", i, r.Status, want)
		}
	}
}

// TestNoPipelineWithoutKeptTurn: with turns not kept across commands,
// every launch is waited for on its own, as before.
func TestNoPipelineWithoutKeptTurn(t *testing.T) {
	g, q := chainGuest(t, 64, -1, false)
	g.mustOK(g.run(g.tick(64, 0), g.tick(64, 1), g.tick(64, 2))...)
	if launches, enqueues, _ := q.counts(); launches != 3 || enqueues != 0 {
		t.Errorf("3 launches without a kept turn: %d waited for alone, %d enqueued; want 3 and 0", launches, enqueues)
	}
}

// TestPipelinedLaunchesWithReuse: on an instance with result reuse, a
// chain of launches from a fresh buffer (each one eligible, none repeated,
// so none recorded) is pipelined too, and its result is the chain's. When
// one of them fails, the outputs named after the keys of it and of the
// launches enqueued after it are forgotten: no later key is built on them.
func TestPipelinedLaunchesWithReuse(t *testing.T) {
	const items, n = 64, 12
	for _, fail := range []int{-1, 5} {
		t.Run(fmt.Sprint("fail ", fail), func(t *testing.T) {
			g, q := chainGuest(t, items, time.Hour, true)
			if fail >= 0 {
				q.failAt[fail] = true
			}
			recs := g.run(g.ticks(items, n)...)
			for i, r := range recs {
				if want := abi.StatusOK; i != fail && r.Status != want {
					t.Fatalf("launch %d: status %v, want %v", i, r.Status, want)
				}
			}
			if _, enqueues, _ := q.counts(); enqueues != n {
				t.Errorf("%d launches of a chain with reuse on: %d enqueued, want all", n, enqueues)
			}
			// The worker is idle: the test may look at the buffer's state.
			known := g.in.state.buffers[1].known
			if fail < 0 {
				dl, read := g.download(1, 4*items)
				g.mustOK(g.run(dl)...)
				got := read()
				for i := 0; i < items; i++ {
					if v := binary.LittleEndian.Uint32(got[4*i:]); v != chained(i, n) {
						t.Fatalf("a[%d] = %d after %d launches, want %d", i, v, n, chained(i, n))
					}
				}
				if !known {
					t.Errorf("the chain's output is not named after its last launch's key")
				}
			} else if known {
				t.Errorf("launch %d failed, yet the buffer it and the launches after it wrote is still named after a key", fail)
			}
		})
	}
}

// TestPipelinedBatchSendsOneNotice is the mechanism test of coalesced
// completion notices: a batch of pipelined launches has its records
// written back to back and one notice (InstanceConfig.Notify, on a worker
// an eventfd write that wakes vgpud's main process) for them all, with
// the last launch's index; a command completed on its own still gets its
// own.
func TestPipelinedBatchSendsOneNotice(t *testing.T) {
	const items, n = 64, 10
	g, q := chainGuest(t, items, time.Hour, false)
	for len(g.dones) > 0 {
		<-g.dones // the set-up's
	}
	dl, _ := g.download(1, 4*items)
	recs := g.run(append(g.ticks(items, n), dl)...)
	g.mustOK(recs...)
	if _, enqueues, syncs := q.counts(); enqueues != n || syncs != 1 {
		t.Fatalf("%d launches: %d enqueued, %d syncs; want one batch", n, enqueues, syncs)
	}
	var got []uint32
	for len(g.dones) > 0 {
		got = append(got, <-g.dones)
	}
	first := uint32(recs[0].Seq - 1)           // abi.SeqOf(index) = index + 1
	want := []uint32{first + n - 1, first + n} // the batch's last launch, then the download
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("notices %v for %d pipelined launches and a download from index %d, want %v", got, n, first, want)
	}
}
