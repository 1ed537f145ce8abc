package worker

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/worker/child"
	"github.com/vgpud/vgpud/worker/wire"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	if role := os.Getenv(envPreemptTree); role != "" {
		os.Exit(preemptTree(role))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if liarPath != "" {
			os.RemoveAll(filepath.Dir(liarPath)) // liar's build, shared by the tests
		}
		os.Exit(code)
	}))
}

var (
	liarOnce sync.Once
	liarPath string
	liarErr  error
)

// liar builds testdata/liar, a worker process that breaks the protocol in
// the way its name says, and returns the path of a link named for mode.
func liar(t testing.TB, mode string) string {
	t.Helper()
	liarOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "vgpud-liar-")
		if err != nil {
			liarErr = err
			return
		}
		liarPath = filepath.Join(dir, "liar")
		out, err := exec.Command(goTool, "build", "-o", liarPath, "./testdata/liar").CombinedOutput()
		if err != nil {
			liarErr = errors.New("build testdata/liar: " + err.Error() + "\n" + string(out))
		}
	})
	if liarErr != nil {
		t.Fatal(liarErr)
	}
	p := filepath.Join(t.TempDir(), "liar-"+mode)
	if err := os.Link(liarPath, p); err != nil {
		// Another file system: a copy does as well.
		b, err := os.ReadFile(liarPath)
		if err == nil {
			err = os.WriteFile(p, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// liarPool is a pool whose workers are testdata/liar in mode, serving
// one device named name.
func liarPool(t *testing.T, mode string, dev gpu.Info) *Pool {
	t.Helper()
	p, err := NewPool(Config{
		Devices:    []gpu.Info{dev},
		Dir:        t.TempDir(),
		Executable: liar(t, mode),
		NoSandbox:  true,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var liarDevice = gpu.Info{Name: "liar-device", ComputeUnits: 1, GlobalMemBytes: 64 << 20, MaxAllocBytes: 1 << 20}

// TestLyingWorker: a worker that breaks the protocol in any way is ended
// with the right cause, the instance it held reads StatusDeviceLost, and
// the main process goes on (its pool closes cleanly, nothing leaks).
func TestLyingWorker(t *testing.T) {
	for _, tt := range []struct {
		mode      string
		cause     string
		createErr bool // Create fails (the worker ended before it answered Add)
	}{
		{"wrong-device", CauseStart, true},
		{"reply-unknown-id", CauseProtocol, true},
		{"garbage", CauseProtocol, true},
		{"main-message", CauseProtocol, true},
		{"oversize", CauseProtocol, true},
		{"fds-on-reply", CauseProtocol, true},
		{"release-ungranted", CauseProtocol, false},
		{"double-turn", CauseProtocol, false},
		{"double-taken", CauseProtocol, false},
		{"hold-turn", CauseWatchdog, false},
		{"crash", CauseSignal, false},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			p := liarPool(t, tt.mode, liarDevice)
			defer p.Close()
			lost := make(chan struct{}, 16)
			inst, err := p.Create(InstanceConfig{
				ID: "liar-instance", Domain: "instance:liar-instance",
				Limits: Limits{MemBytes: 1 << 20, KernelTimeout: 100 * time.Millisecond, BuildTimeout: time.Second},
				Notify: func(uint32) { lost <- struct{}{} },
			})
			if tt.createErr {
				if err == nil {
					inst.Close()
					t.Fatalf("Create on a worker that %s succeeded", tt.mode)
				}
			} else {
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				for !inst.Lost() {
					<-lost
				}
				if st, _ := inst.Error(); st != abi.StatusDeviceLost {
					t.Errorf("instance error %v, want %v", st, abi.StatusDeviceLost)
				}
				if err := inst.Doorbell(1); abi.StatusOf(err) != abi.StatusDeviceLost {
					t.Errorf("doorbell on a lost instance: %v, want device lost", err)
				}
				if err := inst.Close(); err != nil {
					t.Errorf("Close of the lost instance: %v", err)
				}
			}
			// The exit is counted by the reaper, which may finish after
			// Create returned: Close waits for it.
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			exits := p.Exits()
			if exits[tt.cause] != 1 || len(exits) != 1 {
				t.Errorf("exits %v, want one by %s", exits, tt.cause)
			}
		})
	}
}

// TestWorkerOpensDeviceByEnumerationIndex: a pool that serves a subset of
// the machine's devices (vgpud -device pthread, the second PoCL device)
// asks each worker for its device's place in gpu.Devices, not for the
// device's place in the pool.
func TestWorkerOpensDeviceByEnumerationIndex(t *testing.T) {
	p := liarPool(t, "honest-index", gpu.Info{Index: 1, Name: "liar-device-1", ComputeUnits: 1, GlobalMemBytes: 64 << 20, MaxAllocBytes: 1 << 20})
	defer p.Close()
	inst, err := p.Create(InstanceConfig{
		ID: "one", Domain: "instance:one",
		Limits: Limits{MemBytes: 1 << 20, KernelTimeout: time.Second, BuildTimeout: time.Second},
		Notify: func(uint32) {},
	})
	if err != nil {
		t.Fatalf("Create on pool device 0 (enumeration index 1) = %v", err)
	}
	if err := inst.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("pool Close = %v", err)
	}
	if exits := p.Exits(); exits[CauseStart] != 0 {
		t.Errorf("exits %v, want no start failure", exits)
	}
}

// TestFreshWorkerGetsNoStaleDoorbell: a doorbell rung while the instance's
// worker was dying (its count left in the eventfd the instance keeps) must
// not reach the fresh worker that a reset starts: it would run against a
// ring the reset disabled and latch an error in the middle of the guest's
// reopening the device (seen as a flaky TestWorkerKilledMidLaunch).
func TestFreshWorkerGetsNoStaleDoorbell(t *testing.T) {
	p := liarPool(t, "stale-bell", liarDevice)
	defer p.Close()
	lost := make(chan struct{}, 16)
	b, err := p.Create(InstanceConfig{
		ID: "bell", Domain: "instance:bell",
		Limits: Limits{MemBytes: 1 << 20, KernelTimeout: time.Second, BuildTimeout: time.Second},
		Notify: func(uint32) { lost <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	in := b.(*procInstance)
	// The guest rings; the worker dies before it reads the count.
	if err := in.Doorbell(1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.WorkerPID("bell"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for !in.Lost() {
		<-lost
	}
	in.Reset() // the guest's reset: a fresh worker
	if in.Lost() {
		t.Fatalf("the fresh worker refused the instance: a stale doorbell count came with it")
	}
	if err := in.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// oldReleaseInstance is an instance on a worker of an earlier release:
// one whose HelloReply has no features (and that answers any request it
// does not know with success, reading nothing). Both are closed when the
// test ends.
func oldReleaseInstance(t *testing.T) *procInstance {
	t.Helper()
	dev := liarDevice
	dev.Name = "liar-device-0"            // what honest-index opens as device 0
	p := liarPool(t, "honest-index", dev) // answers Hello without features
	t.Cleanup(func() { p.Close() })
	be, err := p.Create(InstanceConfig{ID: "old", Domain: "instance:old",
		Limits: Limits{MemBytes: 1 << 20, BuildTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be.(*procInstance)
}

// TestOldWorkerHidesImages: a worker whose HelloReply lacks
// wire.FeatureImages and wire.FeatureIL (one of an earlier release,
// adopted in an upgrade in place) keeps abi.FeatureImages and
// abi.FeatureIL out of the instance's RegFeatures, so that its guest
// never sends it image arguments or SPIR-V or asks for device-info
// version 2 or 3; a worker of 1.8's release hides SPIR-V and images made
// from buffers, one of 1.9's only the latter; a worker of this release
// lets the register say all.
func TestOldWorkerHidesImages(t *testing.T) {
	be := oldReleaseInstance(t)
	want := uint32(abi.Features &^ abi.FeatureImages &^ abi.FeatureIL &^ abi.FeatureImageBuffers)
	if got := mmio.New(be).ReadBAR(abi.RegFeatures, 4); got != uint64(want) {
		t.Errorf("RegFeatures with a worker of an earlier release = %#x, want %#x", got, want)
	}
	v18 := &procInstance{proc: &process{info: wire.HelloReply{Features: wire.FeatureGuestLog | wire.FeatureImages}}}
	if got, want := v18.ABIFeatures(), uint32(abi.Features&^abi.FeatureIL&^abi.FeatureImageBuffers); got != want {
		t.Errorf("ABIFeatures with a worker of 1.8's release = %#x, want %#x", got, want)
	}
	v19 := &procInstance{proc: &process{info: wire.HelloReply{Features: wire.FeatureGuestLog | wire.FeatureImages | wire.FeatureIL}}}
	if got, want := v19.ABIFeatures(), uint32(abi.Features&^abi.FeatureImageBuffers); got != want {
		t.Errorf("ABIFeatures with a worker of 1.9's release = %#x, want %#x", got, want)
	}
	now := &procInstance{proc: &process{info: wire.HelloReply{Features: wire.Features}}}
	if got := now.ABIFeatures(); got != abi.Features {
		t.Errorf("ABIFeatures with a worker of this release = %#x, want %#x", got, abi.Features)
	}
}
