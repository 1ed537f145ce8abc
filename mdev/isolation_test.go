package mdev

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/worker"
)

// isoProfile has short time budgets, so that the watchdog's cases end in
// seconds.
var isoProfile = Profile{Name: "iso", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8,
	TurnTimeout: Duration(2 * time.Second), BuildTimeout: Duration(5 * time.Second)}

// guestTimeout bounds every wait of either guest. It is generous: a
// build's budget counts CPU time, so on a loaded host (load 7-13 on two
// cores) the compiler bomb may hold its worker for up to eight times the
// hostile domain's 5 s before it is ended, and the attacker waits for
// that; what is tested is that the attacks end and never reach the good
// guest, not how fast.
const guestTimeout = 2 * time.Minute

// mainSecret is a secret in vgpud's own memory (this test process is the
// main process): no guest may read it back.
var mainSecret = newSecret()

func newSecret() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

// goodGuest computes beside a hostile one: it holds a buffer with a secret
// and runs the suite until stopped; every run must pass and the secret
// must stay intact.
type goodGuest struct {
	d      *driver.Device
	secret []byte
	buf    driver.Buffer
	runs   int
	errs   []error
	worst  time.Duration
}

func newGoodGuest(t *testing.T, inst *Instance) *goodGuest {
	t.Helper()
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{Timeout: guestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	g := &goodGuest{d: d, secret: newSecret()}
	if g.buf, err = d.CreateBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(g.buf, 0, bytes.Repeat(g.secret, (64<<10)/32)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	return g
}

// needles are what an attacker must never read: both secrets' first bytes.
func (g *goodGuest) needles() [][]byte { return [][]byte{g.secret[:16], mainSecret[:16]} }

// loop runs the suite until ctx ends or a run fails.
func (g *goodGuest) loop(ctx context.Context) {
	for ctx.Err() == nil && g.once() {
	}
}

// once runs the suite once and reports whether it passed.
func (g *goodGuest) once() bool {
	start := time.Now()
	rep := suite.Run(context.Background(), g.d, suite.Options{VectorN: 4096, MatrixN: 64, ReduceN: 1 << 14})
	g.worst = max(g.worst, time.Since(start))
	g.runs++
	if !rep.OK() {
		g.errs = append(g.errs, errors.New(rep.String()))
	}
	return rep.OK()
}

// check verifies the good guest's secret buffer and its runs.
func (g *goodGuest) check(t *testing.T) {
	t.Helper()
	got := make([]byte, 64<<10)
	if err := g.d.Read(g.buf, 0, got); err != nil {
		t.Fatalf("good guest: read its buffer back: %v", err)
	}
	if !bytes.Equal(got, bytes.Repeat(g.secret, (64<<10)/32)) {
		t.Errorf("good guest's buffer changed under the attacks")
	}
	if g.runs == 0 || len(g.errs) > 0 {
		t.Errorf("good guest: %d runs, failures: %v", g.runs, errors.Join(g.errs...))
	}
	t.Logf("good guest: %d suite runs, the slowest %v", g.runs, g.worst)
}

// TestIsolationAttacks: a hostile guest in its own trust domain runs every
// attack (pointer scan, endless kernel, compiler crash and bomb, wild
// write, huge private array) while a good guest in another domain
// computes with a secret in its buffer. Each attack ends at most the
// hostile domain's device context (the hostile guest resets and goes on);
// the good guest's every run passes, its buffer keeps its bytes, no secret
// (its, or one in vgpud's own memory) is read back, vgpud's manager still
// answers, and the workers that ended are counted by cause.
func TestIsolationAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs attacks that take seconds each")
	}
	// The good guest's own budgets are generous: what is tested is that
	// the attacks never reach it, not how fast it compiles on a loaded
	// host (under CI load a suite build once ran over the attacker's 5 s).
	goodProfile := isoProfile
	goodProfile.Name, goodProfile.TurnTimeout, goodProfile.BuildTimeout = "iso-good", Duration(guestTimeout), Duration(guestTimeout)
	m := newManager(t, []Profile{isoProfile, goodProfile})
	good := mustCreate(t, m, CreateRequest{Profile: goodProfile.Name})
	bad := mustCreate(t, m, CreateRequest{Profile: "iso"})
	g := newGoodGuest(t, good)
	badVM := attach(t, bad)
	// The harness VM never takes back DMA pages a closed driver had: each
	// reopen takes the smallest staging pool.
	reopen := func() (*driver.Device, error) {
		return driver.Open(badVM, badVM, driver.Options{Timeout: guestTimeout, StagingBytes: driver.MinStagingBytes})
	}
	bd, err := reopen()
	if err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.loop(ctx)
	}()
	rep, bd := suite.RunAttacks(context.Background(), bd, suite.AttackOptions{Needles: g.needles(), Reopen: reopen})
	stop()
	wg.Wait()
	bd.Close()
	if !rep.OK() {
		t.Errorf("attacks:\n%s", rep)
	}
	// The endless kernel, the compiler bomb and the crashes each end the
	// hostile domain's worker.
	if rep.Losses < 4 {
		t.Errorf("the attacks lost %d device contexts, want at least 4", rep.Losses)
	}
	g.check(t)
	if st, _ := good.Error(); st != abi.StatusOK || good.Lost() {
		t.Errorf("good instance: error %v, lost %v", st, good.Lost())
	}
	if n := len(m.List()); n != 2 {
		t.Errorf("the manager lists %d instances, want 2", n)
	}
	exits := m.Pool().Exits()
	t.Logf("workers ended: %v", exits)
	for _, cause := range []string{worker.CauseWatchdog, worker.CauseBuildTimeout, crashCause(m)} {
		if exits[cause] == 0 {
			t.Errorf("no worker ended by %s: %v", cause, exits)
		}
	}
}

// TestWorkerKilledMidLaunch: the hostile domain's worker is killed from
// outside (SIGKILL) while its guest's launch holds the device. The guest
// sees its device lost, resets and computes again; the good guest in
// another domain is not disturbed.
func TestWorkerKilledMidLaunch(t *testing.T) {
	// A budget long enough that the kill, not the watchdog, ends the turn.
	long := isoProfile
	long.TurnTimeout = Duration(time.Minute)
	m := newManager(t, []Profile{long})
	good := mustCreate(t, m, CreateRequest{Profile: "iso"})
	bad := mustCreate(t, m, CreateRequest{Profile: "iso"})
	g := newGoodGuest(t, good)
	badVM := attach(t, bad)
	bd, err := driver.Open(badVM, badVM, driver.Options{Timeout: guestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	// A kernel that runs until its buffer's second word is set, which
	// never happens: it holds the device until its worker dies.
	p, _, err := bd.Build(`__kernel void hold(__global volatile int *o) { while (o[1] == 0) { o[0]++; } }`, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := bd.CreateBuffer(64)
	if err := bd.Write(b, 0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := bd.Launch(p, "hold", driver.Range1(1, 0), driver.BufferArg(b)); err != nil {
		t.Fatal(err)
	}
	if err := bd.Flush(); err != nil {
		t.Fatal(err)
	}
	sc := m.pool.Sched(bad.Device())
	for sc.Stats().Holder != bad.UUID() {
		if _, ok := bd.Completion(bd.Tail() - 1); ok {
			t.Fatalf("the launch ended before it was seen holding the device")
		}
		time.Sleep(time.Millisecond)
	}
	pid := m.Pool().WorkerPID(bad.UUID())
	if pid == 0 || pid == m.Pool().WorkerPID(good.UUID()) {
		t.Fatalf("worker pids: bad %d, good %d", pid, m.Pool().WorkerPID(good.UUID()))
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := bd.Finish(); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("Finish after the worker was killed = %v, want ErrDeviceLost", err)
	}
	bd.Close()
	// The reset (Open) brings the instance back on a fresh worker.
	bd, err = driver.Open(badVM, badVM, driver.Options{Timeout: guestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	if rep := suite.Run(context.Background(), bd, suite.Options{VectorN: 4096, MatrixN: 64, ReduceN: 1 << 14}); !rep.OK() {
		t.Errorf("hostile guest after its reset:\n%s", rep)
	}
	if bad.Lost() || m.Pool().WorkerPID(bad.UUID()) == pid {
		t.Errorf("after the reset: lost %v, worker %d (the killed one was %d)", bad.Lost(), m.Pool().WorkerPID(bad.UUID()), pid)
	}
	g.once()
	g.check(t)
	if m.Pool().Exits()[worker.CauseSignal] == 0 {
		t.Errorf("the kill was not counted: %v", m.Pool().Exits())
	}
}

// TestUnsealedGuestRAMRefused: a QEMU peer whose guest RAM could shrink
// (an unsealed memfd) is refused: nothing of its RAM is mapped, so
// shrinking the file afterwards and ringing the doorbell reaches nothing
// and crashes nothing; the instance and another one work with a proper VM.
func TestUnsealedGuestRAMRefused(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	other := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	od := openDriver(t, attach(t, other))
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// The peer announces RAM that could shrink: vgpud refuses the map and
	// ends that connection (QEMU's proxy device fails; the VM lives on
	// without it). Nothing of it is mapped anywhere, so a shrink later can
	// fault nothing.
	vm, err := mpqemutest.NewVMUnsealed(c, 64<<20)
	if err == nil {
		if err := vm.Shrink(4096); err != nil {
			t.Fatal(err)
		}
		vm.Write32(abi.RegRingTail, 1) // a doorbell into the void
		if _, err := driver.Open(vm, vm, driver.Options{Timeout: time.Second}); err == nil {
			t.Errorf("driver.Open on a VM whose RAM was refused = nil error")
		}
		vm.Close()
	}
	for inst.Attached() { // its hang-up is noticed asynchronously
		time.Sleep(time.Millisecond)
	}
	if rep := suite.Run(context.Background(), od, suite.Options{VectorN: 4096, MatrixN: 64, ReduceN: 1 << 14}); !rep.OK() {
		t.Errorf("other guest:\n%s", rep)
	}
	// The instance serves a proper VM afterwards.
	d := openDriver(t, attach(t, inst))
	if rep := suite.Run(context.Background(), d, suite.Options{VectorN: 4096, MatrixN: 64, ReduceN: 1 << 14}); !rep.OK() {
		t.Errorf("the same instance with sealed RAM:\n%s", rep)
	}
}

// TestCompilerCachePerDomain: each trust domain compiles into a cache of
// its own, so a source one tenant built leaves no trace (no entry, so no
// faster build) in another's.
func TestCompilerCachePerDomain(t *testing.T) {
	m := newManager(t, nil)
	a := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	b := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	da, db := openDriver(t, attach(t, a)), openDriver(t, attach(t, b))
	ca, cb := m.Pool().CacheDir(a.UUID()), m.Pool().CacheDir(b.UUID())
	if ca == "" || cb == "" || ca == cb {
		t.Fatalf("cache directories %q and %q: want two, distinct", ca, cb)
	}
	const src = `__kernel void only_tenant_a_knows_this(__global float *o) { o[get_global_id(0)] = 42.0f; }`
	if _, _, err := da.Build(src, ""); err != nil {
		t.Fatal(err)
	}
	if mesaCache(t, ca) > 0 {
		// Mesa (rusticl) keeps its cache under the worker's HOME, its
		// private directory, in a database that its device set-up
		// writes to before any build, so a program is not a file of
		// its own there (docs/platforms.md): each domain's cache holds
		// data of its own build, and no more can be told apart.
		if _, _, err := db.Build(src, ""); err != nil {
			t.Fatal(err)
		}
		if mesaCache(t, cb) == 0 {
			t.Errorf("b's build left no Mesa cache in its own directory %s", cb)
		}
		return
	}
	if programs(t, ca) == 0 {
		t.Errorf("a's build left no program in its cache %s", ca)
	}
	if n := programs(t, cb); n != 0 {
		t.Errorf("b's cache %s holds %d programs before b built anything", cb, n)
	}
	if _, _, err := db.Build(src, ""); err != nil {
		t.Fatal(err)
	}
	if programs(t, cb) == 0 {
		t.Errorf("b's build left no program in its own cache")
	}
}

// mesaCache is the size of the entries of Mesa's shader cache database in
// a worker's private directory (Mesa's default place under HOME), 0 when
// it has none: the worker's platform is not Mesa.
func mesaCache(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, ".cache", "mesa_shader_cache_db"), func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && d.Name() == "mesa_cache.db" {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

// programs counts the compiled programs in a PoCL cache directory (one
// program.bc per entry).
func programs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() == "program.bc" {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// crashCause is how a worker's end by a crashing kernel or compiler is
// counted: the executor's end where kernels run in one (docs/isolation.md
// "Executors"), else the worker's own death by a signal.
func crashCause(m *Manager) string {
	if m.Pool().KernelsInExecutor(0) {
		return worker.CauseExecutor
	}
	return worker.CauseSignal
}
