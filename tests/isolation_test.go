package tests

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/worker"
)

// mainSecret lives in vgpud's own memory (this test process is the main
// process): no guest may read it back.
var mainSecret = func() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}()

// TestIsolationTwoGuests: two real QEMU guests in different trust domains
// (each its own, the default). The hostile one runs every isolation
// attack (vgpu-suite -mode attack: a pointer scan around its buffers, an
// endless kernel, a compiler crash and a compiler bomb, a wild write, a
// huge private array), resetting its device after each loss; the good one
// runs the suite five times with a secret in a device buffer. The good
// guest's results and its buffer stay correct, neither its secret nor one
// in vgpud's memory is read back, the hostile guest still computes at the
// end, vgpud answers, and the ended workers are counted.
func TestIsolationTwoGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatal(err)
	}
	prof := mdev.Profile{Name: "iso", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8,
		TurnTimeout: mdev.Duration(2 * time.Second), BuildTimeout: mdev.Duration(5 * time.Second)}
	// The good guest's own budgets are generous: what is tested is that
	// the attacks never reach it, not how fast it compiles while the
	// attacker's compiler bomb holds the CPUs (in CI a build of the good
	// guest once ran 5.2 s against the attacker's 5 s budget). Both guests
	// wait up to 120 s for a command: a build's budget counts CPU time, so
	// on a loaded host the attacker's compiler bomb runs up to 8 x 5 s of
	// wall-clock time before it is ended.
	goodProf := prof
	goodProf.Name, goodProf.TurnTimeout, goodProf.BuildTimeout = "iso-good", mdev.Duration(30*time.Second), mdev.Duration(60*time.Second)
	m := newManager(t, d, mdev.Config{Devices: []gpu.Device{d}, Profiles: []mdev.Profile{prof, goodProf}, SocketDir: t.TempDir(), Transport: mpqemu.Transport{}})
	good, bad := mustCreate(t, m, "iso-good"), mustCreate(t, m, "iso")
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	h, rep, console, err := runBesideHostile(t, bad, []string{"-mode=attack",
		"-needles=" + hex.EncodeToString(secret) + ":" + hex.EncodeToString(mainSecret), "-timeout=120s"},
		good, "-mode=reuse", "-repeat=5", "-seed=3", "-secret="+hex.EncodeToString(secret), "-timeout=120s")
	if h.err != nil || !h.rep.OK() || h.rep.Mode != "attack" {
		t.Errorf("hostile guest: err %v\n%s\nconsole:\n%s", h.err, h.rep, h.console)
	}
	if h.rep.Losses < 4 {
		t.Errorf("the attacks lost %d device contexts, want at least 4", h.rep.Losses)
	}
	if err != nil || !rep.OK() {
		t.Errorf("good guest: err %v\n%s\nconsole:\n%s", err, rep, console)
	}
	if st, _ := good.Error(); st != abi.StatusOK || good.Lost() {
		t.Errorf("good instance: error %v, lost %v", st, good.Lost())
	}
	exits := m.Pool().Exits()
	t.Logf("workers ended: %v", exits)
	if exits[worker.CauseWatchdog] == 0 || exits[worker.CauseBuildTimeout] == 0 {
		t.Errorf("the watchdog or the build timer ended no worker: %v", exits)
	}
	if n := len(m.List()); n != 2 {
		t.Errorf("the manager lists %d instances, want 2", n)
	}
}
