package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stepKernel is the kernel in Go, for the fake device. corrupt, if set,
// returns a bit to flip in out[0] (0: none).
func stepKernel(corrupt func() uint32) drivertest.KernelFunc {
	return func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
		in, out := fromBytes(buf(d.Args[0].Handle)), make([]uint32, d.GlobalSize[0])
		if uint64(len(in)) != d.GlobalSize[0] {
			return fmt.Errorf("global size %d, buffer of %d elements", d.GlobalSize[0], len(in))
		}
		cpuStep(in, out, binary.LittleEndian.Uint32(d.Args[2].Bytes))
		if corrupt != nil {
			out[0] ^= corrupt()
		}
		copy(buf(d.Args[1].Handle), toBytes(out))
		return nil
	}
}

// ballastHash is the ballast kernels' hash in Go.
func ballastHash(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	return (x ^ (x >> 16)) | 1
}

// ballastKernels are the ballast kernels in Go, for the fake device.
func ballastKernels() map[string]drivertest.KernelFunc {
	return map[string]drivertest.KernelFunc{
		FillKernel: func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
			b, seed := buf(d.Args[0].Handle), binary.LittleEndian.Uint32(d.Args[1].Bytes)
			for i := range d.GlobalSize[0] {
				binary.LittleEndian.PutUint32(b[4*i:], ballastHash(uint32(i)^seed))
			}
			return nil
		},
		CheckKernel: func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
			b, seed, bad := buf(d.Args[0].Handle), binary.LittleEndian.Uint32(d.Args[1].Bytes), buf(d.Args[2].Handle)
			for i := range d.GlobalSize[0] {
				if binary.LittleEndian.Uint32(b[4*i:]) != ballastHash(uint32(i)^seed) {
					binary.LittleEndian.PutUint32(bad, binary.LittleEndian.Uint32(bad)+1)
				}
			}
			return nil
		},
	}
}

// renamed is the BAR0 of another device model over the same state.
type renamed struct {
	driver.Registers
	name string
	cus  uint32
}

func (r renamed) Read32(off uint32) uint32 {
	switch {
	case off == abi.RegComputeUnits:
		return r.cus
	case off >= abi.RegDeviceName && off < abi.RegDeviceName+abi.DeviceNameLen:
		var b [4]byte
		copy(b[:], r.name[min(int(off-abi.RegDeviceName), len(r.name)):])
		return binary.LittleEndian.Uint32(b[:])
	}
	return r.Registers.Read32(off)
}

func openFake(t *testing.T, corrupt func() uint32) (*driver.Device, *drivertest.Device) {
	t.Helper()
	ks := ballastKernels()
	ks[Kernel] = stepKernel(corrupt)
	f := drivertest.New(drivertest.Config{}, ks)
	d, err := driver.Open(f, f, driver.Options{StagingBytes: driver.MinStagingBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, f
}

func TestReference(t *testing.T) {
	// Pinned: the same seed gives the same job on every host.
	if got, want := reference(1, 4, 0), initial(1, 4); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reference(0 steps) = %v, want the initial vector %v", got, want)
	}
	a, b := reference(7, 1000, 5), reference(7, 1000, 5)
	if checksum(a) != checksum(b) || checksum(a) == checksum(reference(7, 1000, 6)) {
		t.Errorf("reference is not deterministic or does not change per step")
	}
	// One element: its neighbour is itself.
	in, out := []uint32{0x12345678}, make([]uint32, 1)
	cpuStep(in, out, 3)
	x := uint32(0x12345678) ^ (0x12345678 >> 3) ^ 3
	x = x*2654435761 + 6
	if out[0] != x^(x>>15) {
		t.Errorf("cpuStep(n=1) = %#x, want %#x", out[0], x^(x>>15))
	}
}

func TestJob(t *testing.T) {
	tests := []struct {
		cfg   Config
		lines int
	}{
		{Config{Steps: 1, N: 1, Seed: 1, Progress: 10}, 0},
		{Config{Steps: 20, N: 1000, Seed: 2, Progress: 10}, 2},
		{Config{Steps: 7, N: 4096, Seed: 3, Progress: 1}, 7},
		{Config{Steps: 5, N: 33, Seed: 4, Progress: 0, Pace: time.Millisecond}, 0},
		{Config{Steps: 6, N: 64, Seed: 5, Ballast: 3<<20 + 6, Rewrite: 1}, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-steps-%d-elements", tt.cfg.Steps, tt.cfg.N), func(t *testing.T) {
			d, f := openFake(t, nil)
			var out bytes.Buffer
			sum, steps, err := job(context.Background(), d, tt.cfg, &out)
			if err != nil {
				t.Fatalf("job() = %v", err)
			}
			if steps != tt.cfg.Steps {
				t.Errorf("job() ran %d steps, want %d", steps, tt.cfg.Steps)
			}
			if want := checksum(reference(tt.cfg.Seed, tt.cfg.N, tt.cfg.Steps)); sum != want {
				t.Errorf("job() sum %016x, want %016x", sum, want)
			}
			if tt.cfg.Ballast == 0 && f.Launches != tt.cfg.Steps {
				t.Errorf("%d launches, want %d", f.Launches, tt.cfg.Steps)
			}
			lines := strings.Count(out.String(), Prefix+"step ")
			if lines != tt.lines || (lines > 0 && !strings.Contains(out.String(), "device=drivertest fake vgpu cus=2 longest=")) {
				t.Errorf("job() printed %q, want %d progress lines", out.String(), tt.lines)
			}
			if f.Buffers() != 0 {
				t.Errorf("job() left %d buffers", f.Buffers())
			}
		})
	}
}

// TestJobDetectsLostBallast: a ballast element that changes behind the
// job's back fails it.
func TestJobDetectsLostBallast(t *testing.T) {
	ks := ballastKernels()
	fill, fills := ks[FillKernel], 0
	ks[FillKernel] = func(desc *abi.LaunchDesc, buf func(uint32) []byte) error {
		err := fill(desc, buf)
		if fills++; fills == 2 {
			buf(desc.Args[0].Handle)[8] ^= 1
		}
		return err
	}
	ks[Kernel] = stepKernel(nil)
	f := drivertest.New(drivertest.Config{}, ks)
	d, err := driver.Open(f, f, driver.Options{StagingBytes: driver.MinStagingBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, _, err = job(context.Background(), d, Config{Steps: 1, N: 16, Seed: 1, Ballast: 1 << 20, Rewrite: 1}, io.Discard)
	if !errors.Is(err, errMismatch) {
		t.Fatalf("job() with a changed ballast element = %v, want errMismatch", err)
	}
}

// TestJobDuration: with -duration the job ends after the step that
// finishes past it and checks the steps it ran.
func TestJobDuration(t *testing.T) {
	d, _ := openFake(t, nil)
	cfg := Config{Steps: 1 << 30, N: 64, Seed: 9, Pace: time.Millisecond, Duration: 20 * time.Millisecond}
	sum, steps, err := job(context.Background(), d, cfg, io.Discard)
	if err != nil {
		t.Fatalf("job() = %v", err)
	}
	if steps < 1 || steps >= cfg.Steps {
		t.Fatalf("job() ran %d steps", steps)
	}
	if want := checksum(reference(cfg.Seed, cfg.N, steps)); sum != want {
		t.Errorf("job() sum %016x after %d steps, want %016x", sum, steps, want)
	}
}

func TestJobDetectsWrongResult(t *testing.T) {
	n := 0
	d, _ := openFake(t, func() uint32 {
		if n++; n == 3 {
			return 1 << 7
		}
		return 0
	})
	_, _, err := job(context.Background(), d, Config{Steps: 4, N: 64, Seed: 1}, io.Discard)
	if !errors.Is(err, errMismatch) {
		t.Errorf("job() with a corrupted step = %v, want errMismatch", err)
	}
}

// lineWriter calls onLine for each complete line written.
type lineWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	all    bytes.Buffer
	onLine func(string)
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.all.Write(b)
	w.buf.Write(b)
	var lines []string
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(w.buf.Next(i+1)))
	}
	w.mu.Unlock()
	for _, l := range lines {
		if w.onLine != nil {
			w.onLine(strings.TrimSuffix(l, "\n"))
		}
	}
	return len(b), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

var progressRE = regexp.MustCompile(`^ITERATE step (\d+)/(\d+) device=(.*) cus=(\d+) longest=\d+us$`)

// TestJobAcrossMigration: the test suspends the device when the job
// reports step 10 and resumes it on "another model" a little later; the
// job's next launch waits, and the job ends with the right result on the
// new device.
func TestJobAcrossMigration(t *testing.T) {
	d, f := openFake(t, nil)
	resumed := make(chan error, 1)
	out := &lineWriter{onLine: func(l string) {
		if !strings.HasPrefix(l, "ITERATE step 10/") {
			return
		}
		// The job is between steps: nothing is in flight.
		if err := d.Suspend(context.Background()); err != nil {
			resumed <- err
			return
		}
		go func() {
			time.Sleep(20 * time.Millisecond)
			resumed <- d.Resume(renamed{Registers: f, name: "Destination GPU", cus: 80})
		}()
	}}
	cfg := Config{Steps: 25, N: 512, Seed: 9, Progress: 5}
	sum, _, err := job(context.Background(), d, cfg, out)
	if err != nil {
		t.Fatalf("job() across a migration = %v\n%s", err, out)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("Suspend/Resume = %v", err)
	}
	if want := checksum(reference(cfg.Seed, cfg.N, cfg.Steps)); sum != want {
		t.Errorf("sum %016x, want %016x", sum, want)
	}
	var devices []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if m := progressRE.FindStringSubmatch(l); m != nil {
			devices = append(devices, m[3]+"/"+m[4])
		}
	}
	want := []string{"drivertest fake vgpu/2", "drivertest fake vgpu/2", "Destination GPU/80", "Destination GPU/80", "Destination GPU/80"}
	if fmt.Sprint(devices) != fmt.Sprint(want) {
		t.Errorf("progress lines name %q, want %q\n%s", devices, want, out)
	}
}

// useFake makes run open a fake device, and reopen it after a migration
// as "Destination GPU".
func useFake(t *testing.T) *drivertest.Device {
	t.Helper()
	ks := ballastKernels()
	ks[Kernel] = stepKernel(nil)
	f := drivertest.New(drivertest.Config{}, ks)
	oldOpen, oldReopen, oldPort := openDevice, reopenDevice, portOpener
	openDevice = func(string) (driver.Registers, driver.Memory, error) { return f, f, nil }
	reopenDevice = func(context.Context, string) (driver.Registers, error) {
		return renamed{Registers: f, name: "Destination GPU", cus: 80}, nil
	}
	portOpener = func() func() (io.ReadWriteCloser, error) {
		return func() (io.ReadWriteCloser, error) { return nil, errors.New("no port in tests") }
	}
	t.Cleanup(func() { openDevice, reopenDevice, portOpener = oldOpen, oldReopen, oldPort })
	return f
}

func TestRun(t *testing.T) {
	useFake(t)
	var out, errb bytes.Buffer
	args := []string{"-agent", "none", "-steps", "30", "-n", "256", "-staging", "0"}
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("run(%q) = %v\n%s%s", args, err, out.String(), errb.String())
	}
	want := fmt.Sprintf("ITERATE OK steps=30 sum=%016x\n", checksum(reference(1, 256, 30)))
	if !strings.HasSuffix(out.String(), want) || strings.Count(out.String(), "ITERATE step ") != 3 ||
		!strings.HasPrefix(out.String(), "ITERATE start steps=30 n=256 device=drivertest fake vgpu cus=2\n") {
		t.Errorf("run(%q) printed %q, want a start line, 3 progress lines and %q", args, out.String(), want)
	}
}

func TestRunBadArgs(t *testing.T) {
	useFake(t)
	for _, args := range [][]string{{"-steps", "0"}, {"-n", "0"}, {"-agent", "pigeon"}, {"-progress", "-1"}, {"extra"}, {"-nope"},
		{"-min-mem", "lots"}, {"-min-mem", "2TiB"}, {"-pref-mem", "1MiB"}, {"-min-mem", "2MiB", "-pref-mem", "1MiB"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, io.Discard); err == nil || errors.Is(err, errFailed) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

func TestRunFailsWithoutDevice(t *testing.T) {
	useFake(t)
	openDevice = func(string) (driver.Registers, driver.Memory, error) { return nil, nil, driver.ErrNoDevice }
	var out bytes.Buffer
	err := run(context.Background(), []string{"-agent", "none"}, &out, io.Discard)
	if !errors.Is(err, errFailed) || !strings.HasPrefix(out.String(), "ITERATE FAIL open vgpu: ") {
		t.Errorf("run() without a device = %v, printed %q; want an ITERATE FAIL line", err, out.String())
	}
}

// listenRelay is a relay socket whose first connection comes out of
// conns.
func listenRelay(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "relay.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	conns := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			conns <- c
		}
	}()
	return sock, conns
}

// stepLine returns an output writer and a channel closed when the job
// prints its step-th progress line.
func stepLine(step int) (*lineWriter, <-chan struct{}) {
	reached := make(chan struct{})
	var once sync.Once
	prefix := fmt.Sprintf("ITERATE step %d/", step)
	return &lineWriter{onLine: func(l string) {
		if strings.HasPrefix(l, prefix) {
			once.Do(func() { close(reached) })
		}
	}}, reached
}

// runWithHost runs the command with args, its output in out, while a
// fake host side ends with an error on hostErr; both must succeed. It
// returns the output.
func runWithHost(t *testing.T, args []string, out *lineWriter, hostErr <-chan error) string {
	t.Helper()
	if err := run(context.Background(), args, out, io.Discard); err != nil {
		t.Fatalf("run(%q) = %v\n%s", args, err, out)
	}
	if err := <-hostErr; err != nil {
		t.Fatalf("host side: %v\n%s", err, out)
	}
	return out.String()
}

// wantOutput checks that the output s has each of wants.
func wantOutput(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// TestRunMigratesThroughAgent: the whole guest side of a migration. A fake
// relay (the host's end, as vgpu-agent forwards it) sends Quiesce when the
// job reports step 10 and Resume (replugged) once it is answered; the job
// continues on the "new device" and ends OK.
func TestRunMigratesThroughAgent(t *testing.T) {
	useFake(t)
	sock, conns := listenRelay(t)
	out, step10 := stepLine(10)
	hostErr := make(chan error, 1)
	go func() { hostErr <- fakeRelayHost(conns, step10) }()
	args := []string{"-agent", "relay", "-agent-socket", sock, "-steps", "40", "-n", "128", "-pace", "2ms", "-progress", "5", "-staging", "0"}
	wantOutput(t, runWithHost(t, args, out, hostErr),
		"ITERATE quiesced\n",
		"ITERATE resumed replugged=true kept-mapping=false device=Destination GPU cus=80 took=",
		"ITERATE step 40/40 device=Destination GPU cus=80 longest=",
		fmt.Sprintf("ITERATE OK steps=40 sum=%016x\n", checksum(reference(1, 128, 40))),
	)
}

// relayPeer is the host's end of a program's connection, as vgpu-agent's
// relay would serve it: it answers the program's Hellos and hands over
// everything the program sends.
type relayPeer struct {
	c    net.Conn
	msgs chan agentmsg.Message
}

// acceptRelayPeer takes the program's connection; a Hello that lacks the
// features need closes it.
func acceptRelayPeer(conns <-chan net.Conn, need uint32) (*relayPeer, error) {
	var c net.Conn
	select {
	case c = <-conns:
	case <-time.After(time.Minute):
		return nil, errors.New("the program did not connect")
	}
	p := &relayPeer{c: c, msgs: make(chan agentmsg.Message, 64)}
	go func() {
		defer close(p.msgs)
		r := agentmsg.NewReader(c)
		for {
			m, err := r.Read()
			if err != nil {
				return
			}
			if h, ok := m.(*agentmsg.Hello); ok {
				if h.Features&need != need {
					c.Close()
					return
				}
				p.send(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Features: agentmsg.FeatureWatch | agentmsg.FeatureMigration | agentmsg.FeatureReconfig, Ident: "fake relay"})
			}
			p.msgs <- m
		}
	}()
	return p, nil
}

func (p *relayPeer) send(m agentmsg.Message) { p.c.Write(agentmsg.Marshal(m)) }

// await skips messages up to the next one of want's type, which must
// print like want.
func (p *relayPeer) await(want agentmsg.Message) error {
	timeout := time.After(time.Minute)
	for {
		select {
		case m, ok := <-p.msgs:
			if !ok {
				return fmt.Errorf("program went away waiting for %v", want.Type())
			}
			if m.Type() != want.Type() {
				continue
			}
			if fmt.Sprint(m) != fmt.Sprint(want) {
				return fmt.Errorf("got %+v, want %+v", m, want)
			}
			return nil
		case <-timeout:
			return fmt.Errorf("no %v", want.Type())
		}
	}
}

// ask sends req and awaits answer.
func (p *relayPeer) ask(req, answer agentmsg.Message) error {
	p.send(req)
	if err := p.await(answer); err != nil {
		return fmt.Errorf("answer to %+v: %w", req, err)
	}
	return nil
}

// close waits for the program to disconnect.
func (p *relayPeer) close() {
	for range p.msgs {
	}
	p.c.Close()
}

// fakeRelayHost answers the program's Hello, then at step10 runs one
// migration: Quiesce, expect Quiesced OK with 1 program, Resume, expect
// Resumed OK with 1 program. It returns when the program disconnects.
func fakeRelayHost(conns <-chan net.Conn, step10 <-chan struct{}) error {
	p, err := acceptRelayPeer(conns, agentmsg.FeatureMigration)
	if err != nil {
		return err
	}
	defer p.close()
	select {
	case <-step10:
	case <-time.After(time.Minute):
		return errors.New("the job never reached step 10")
	}
	if err := p.ask(&agentmsg.Quiesce{Cookie: 100, DeadlineMs: 60_000},
		&agentmsg.Quiesced{Cookie: 100, Status: agentmsg.MigrationOK, Programs: 1}); err != nil {
		return err
	}
	return p.ask(&agentmsg.Resume{Cookie: 101, Flags: agentmsg.ResumeReplugged, DeadlineMs: 60_000},
		&agentmsg.Resumed{Cookie: 101, Status: agentmsg.MigrationOK, Programs: 1})
}

// okHandler is a MigrationHandler that does nothing.
type okHandler struct{}

func (okHandler) Quiesce(context.Context) error      { return nil }
func (okHandler) Resume(context.Context, bool) error { return nil }

// TestJobEndsAfterMigrations: with -migrations 1 the job ends after the
// first step that finishes once the handler has resumed it on a
// re-plugged device (an abandoned migration does not count), and its
// result is checked for the steps it ran.
func TestJobEndsAfterMigrations(t *testing.T) {
	d, _ := openFake(t, nil)
	migrated := new(atomic.Int32)
	lw := &lineWriter{onLine: func(l string) {
		r := reporting{h: okHandler{}, d: d, out: io.Discard, migrated: migrated}
		switch {
		case strings.HasPrefix(l, "ITERATE step 2/"):
			r.Resume(context.Background(), false) // abandoned: not a migration
		case strings.HasPrefix(l, "ITERATE step 4/"):
			r.Resume(context.Background(), true)
		}
	}}
	cfg := Config{Steps: 1000, N: 64, Seed: 3, Progress: 1, Migrations: 1, Migrated: migrated}
	sum, steps, err := job(context.Background(), d, cfg, lw)
	if err != nil {
		t.Fatalf("job() = %v", err)
	}
	if steps != 4 {
		t.Errorf("job() ran %d steps, want 4 (it was migrated after step 4)", steps)
	}
	if want := checksum(reference(cfg.Seed, cfg.N, steps)); sum != want {
		t.Errorf("sum %016x, want %016x", sum, want)
	}
}

func TestWorkspaceSize(t *testing.T) {
	for _, tc := range []struct {
		min, pref, quota, want uint64
		fits                   bool
	}{
		{1 << 20, 16 << 20, 64 << 20, 16 << 20, true},  // preferred fits
		{1 << 20, 64 << 20, 64 << 20, 48 << 20, true},  // 3/4 of the quota
		{1 << 20, 0, 64 << 20, 1 << 20, true},          // preferred 0: the minimum
		{48 << 20, 64 << 20, 64 << 20, 48 << 20, true}, // the minimum just fits
		{49 << 20, 64 << 20, 64 << 20, 49 << 20, false},
		{64 << 20, 512 << 20, 256 << 20, 192 << 20, true}, // the e2e test's downgrade
		{0, 0, 0, 0, true},
	} {
		got, fits := workspaceSize(tc.min, tc.pref, tc.quota)
		if got != tc.want || fits != tc.fits {
			t.Errorf("workspaceSize(%d, %d, %d) = %d, %v; want %d, %v", tc.min, tc.pref, tc.quota, got, fits, tc.want, tc.fits)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "67108864": 64 << 20, "64MiB": 64 << 20, "3KiB": 3 << 10, "2GiB": 2 << 30, "1TiB": 1 << 40} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", "64MB", "16777216TiB", "0x10"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}

// TestJobWorkspace: the workspace changes nothing in the result and is
// freed with the rest.
func TestJobWorkspace(t *testing.T) {
	d, f := openFake(t, nil)
	cfg := Config{Steps: 9, N: 256, Seed: 6, WorkMin: 1 << 20, WorkPref: 40 << 20}
	sum, _, err := job(context.Background(), d, cfg, io.Discard)
	if err != nil {
		t.Fatalf("job() = %v", err)
	}
	if want := checksum(reference(cfg.Seed, cfg.N, cfg.Steps)); sum != want {
		t.Errorf("sum %016x with a workspace, want %016x", sum, want)
	}
	if f.Buffers() != 0 {
		t.Errorf("job() left %d buffers", f.Buffers())
	}
	// A minimum that does not fit 3/4 of the fake's 64 MiB fails at
	// start.
	cfg.WorkMin, cfg.WorkPref = 49<<20, 49<<20
	if _, _, err := job(context.Background(), d, cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "workspace") {
		t.Errorf("job() with a workspace that does not fit = %v", err)
	}
}

var reconfigRE = regexp.MustCompile(`^ITERATE reconfig limits mem=(\d+) device=(.*) profile=(.*) workspace=(\d+)$`)

// TestJobReconfig: the job's reconfiguration handler, called as the
// agent calls it, twice (down to 8 MiB at step 5, up to 64 MiB at step
// 12): the step loop waits between Checkpoint and Resume, Cleanup leaves
// the device empty, the workspace follows the quota, and the result is
// the CPU's.
func TestJobReconfig(t *testing.T) {
	d, f := openFake(t, nil)
	cfg := Config{Steps: 20, N: 512, Seed: 4, Progress: 1, WorkMin: 1 << 20, WorkPref: 16 << 20, Ballast: 1 << 20, Rewrite: 1}
	small := agentmsg.Limits{MemBytes: 8 << 20, ComputeUnits: 1, Device: "small gpu", Profile: "small"}
	big := agentmsg.Limits{MemBytes: 64 << 20, ComputeUnits: 2, Device: "big gpu", Profile: "big"}
	var j *iterJob
	blocked := make(chan struct{}, 1)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	reconfigure := func(to agentmsg.Limits) {
		ctx := context.Background()
		// On the job's goroutine, between two steps: the lock is free.
		if err := j.Checkpoint(ctx, to); err != nil {
			errs <- fmt.Errorf("checkpoint: %w", err)
			return
		}
		if err := j.Cleanup(ctx); err != nil {
			errs <- fmt.Errorf("cleanup: %w", err)
			return
		}
		if n := f.Buffers(); n != 0 {
			errs <- fmt.Errorf("%d buffers left after Cleanup", n)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-blocked // the step loop waits for Resume
			if err := j.Reconfigure(ctx, to); err != nil {
				errs <- err
			}
			if err := j.Resume(ctx); err != nil {
				errs <- err
			}
		}()
	}
	out := &lineWriter{onLine: func(l string) {
		switch {
		case strings.HasPrefix(l, "ITERATE step 5/"):
			reconfigure(small)
		case strings.HasPrefix(l, "ITERATE step 12/"):
			reconfigure(big)
		}
	}}
	j = newJob(d, cfg, out)
	j.waiting = func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	sum, steps, err := j.run(context.Background())
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err != nil || steps != cfg.Steps {
		t.Fatalf("job across reconfigurations = %d steps, %v\n%s", steps, err, out)
	}
	if want := checksum(reference(cfg.Seed, cfg.N, cfg.Steps)); sum != want {
		t.Errorf("sum %016x, want %016x", sum, want)
	}
	if f.Buffers() != 0 {
		t.Errorf("job() left %d buffers", f.Buffers())
	}
	var limits []string
	for _, l := range strings.Split(out.String(), "\n") {
		if m := reconfigRE.FindStringSubmatch(l); m != nil {
			limits = append(limits, strings.Join(m[1:], " "))
		}
	}
	// 3/4 of 8 MiB is 6 MiB; the preferred 16 MiB fits 3/4 of 64 MiB.
	want := []string{"8388608 small gpu small 6291456", "67108864 big gpu big 16777216"}
	if fmt.Sprint(limits) != fmt.Sprint(want) {
		t.Errorf("limits lines %q, want %q\n%s", limits, want, out)
	}
	wantOutput(t, out.String(), "ITERATE reconfig checkpoint to=8388608 step=5\n", "ITERATE reconfig checkpoint to=67108864 step=12\n")
}

// TestJobReconfigRefused: limits below the minimum are refused before
// anything stops; the abort that follows changes nothing.
func TestJobReconfigRefused(t *testing.T) {
	d, _ := openFake(t, nil)
	cfg := Config{Steps: 10, N: 64, Seed: 8, Progress: 1, WorkMin: 4 << 20, WorkPref: 8 << 20}
	tiny := agentmsg.Limits{MemBytes: 4 << 20, Device: "tiny"}
	old := agentmsg.Limits{MemBytes: 64 << 20, Device: "drivertest"}
	var j *iterJob
	var herr error
	out := &lineWriter{onLine: func(l string) {
		if !strings.HasPrefix(l, "ITERATE step 3/") {
			return
		}
		ctx := context.Background()
		if err := j.Checkpoint(ctx, tiny); !errors.Is(err, agent.ErrRefused) {
			herr = fmt.Errorf("Checkpoint(4 MiB) = %v, want ErrRefused", err)
		}
		herr = errors.Join(herr, j.Reconfigure(ctx, old), j.Resume(ctx))
	}}
	j = newJob(d, cfg, out)
	sum, _, err := j.run(context.Background())
	if err != nil || herr != nil {
		t.Fatalf("job() = %v; handler: %v\n%s", err, herr, out)
	}
	if want := checksum(reference(cfg.Seed, cfg.N, cfg.Steps)); sum != want {
		t.Errorf("sum %016x, want %016x", sum, want)
	}
	wantOutput(t, out.String(), "ITERATE reconfig refused to=4194304 min=4194304\n", "ITERATE reconfig limits mem=67108864 device=drivertest profile= workspace=8388608\n")
	if strings.Contains(out.String(), "reconfig checkpoint") {
		t.Errorf("a refused checkpoint checkpointed:\n%s", out)
	}
}

// TestRunReconfiguresThroughAgent: the whole guest side of the
// reconfiguration API. The program announces FeatureReconfig and declares
// its needs; at step 10 a fake relay asks it to checkpoint for limits
// below its minimum (refused; aborted), then for 8 MiB: the program frees
// everything on the device, is told the new limits, continues, and ends
// OK.
func TestRunReconfiguresThroughAgent(t *testing.T) {
	f := useFake(t)
	sock, conns := listenRelay(t)
	out, step10 := stepLine(10)
	hostErr := make(chan error, 1)
	go func() {
		hostErr <- func() error {
			p, err := acceptRelayPeer(conns, agentmsg.FeatureMigration|agentmsg.FeatureReconfig)
			if err != nil {
				return err
			}
			defer p.close()
			want := &agentmsg.Resources{Decls: []agentmsg.Declaration{{PID: uint32(os.Getpid()), MinMem: 1 << 20, PrefMem: 16 << 20, Name: "vgpu-iterate"}}}
			if err := p.await(want); err != nil {
				return err
			}
			select {
			case <-step10:
			case <-time.After(time.Minute):
				return errors.New("the job never reached step 10")
			}
			old := agentmsg.Limits{MemBytes: 64 << 20, ComputeUnits: 2, Device: "drivertest", Profile: "big"}
			small := agentmsg.Limits{MemBytes: 8 << 20, ComputeUnits: 1, Device: "Small GPU", Profile: "small"}
			for _, x := range []struct{ req, answer agentmsg.Message }{
				{&agentmsg.Checkpoint{Cookie: 1, DeadlineMs: 60_000, To: agentmsg.Limits{MemBytes: 1 << 20}},
					&agentmsg.Checkpointed{Cookie: 1, Status: agentmsg.ReconfigRefused}},
				{&agentmsg.Reconfigure{Cookie: 2, Flags: agentmsg.ReconfigureAborted, DeadlineMs: 60_000, Now: old},
					&agentmsg.Reconfigured{Cookie: 2, Status: agentmsg.MigrationOK, Programs: 1}},
				{&agentmsg.Checkpoint{Cookie: 3, DeadlineMs: 60_000, To: small},
					&agentmsg.Checkpointed{Cookie: 3, Status: agentmsg.MigrationOK, Programs: 1}},
			} {
				if err := p.ask(x.req, x.answer); err != nil {
					return err
				}
			}
			if n := f.Buffers(); n != 0 {
				return fmt.Errorf("%d buffers on the device after the program checkpointed", n)
			}
			return p.ask(&agentmsg.Reconfigure{Cookie: 4, DeadlineMs: 60_000, Now: small},
				&agentmsg.Reconfigured{Cookie: 4, Status: agentmsg.MigrationOK, Programs: 1})
		}()
	}()
	args := []string{"-agent", "relay", "-agent-socket", sock, "-steps", "40", "-n", "128", "-pace", "2ms", "-progress", "5",
		"-staging", "0", "-min-mem", "1MiB", "-pref-mem", "16777216"}
	wantOutput(t, runWithHost(t, args, out, hostErr),
		"ITERATE reconfig refused to=1048576 min=1048576\n",
		"ITERATE reconfig limits mem=67108864 device=drivertest profile=big workspace=16777216\n",
		"ITERATE reconfig checkpoint to=8388608 step=",
		"ITERATE reconfig limits mem=8388608 device=Small GPU profile=small workspace=6291456\n",
		fmt.Sprintf("ITERATE OK steps=40 sum=%016x\n", checksum(reference(1, 128, 40))),
	)
}

// blockedWriter holds each write until it is given a token.
type blockedWriter struct {
	tokens chan struct{}
	buf    bytes.Buffer
}

func (w *blockedWriter) Write(b []byte) (int, error) {
	<-w.tokens
	return w.buf.Write(b)
}

// TestHandlerLinesDoNotHoldTheAnswer: the migration handler's report
// line is written after the handler returned (the host measures until the
// answer that follows the return: a line on a TCG guest's serial console
// cost tens of milliseconds of the GPU stun), and still before any line
// the job prints after it.
func TestHandlerLinesDoNotHoldTheAnswer(t *testing.T) {
	d, _ := openFake(t, nil)
	bw := &blockedWriter{tokens: make(chan struct{}, 3)}
	out := &lockedWriter{w: bw}
	r := reporting{h: okHandler{}, d: d, out: out, migrated: new(atomic.Int32)}
	// Each returns while its line cannot be written yet (had it waited for
	// the write, it would never return: the bound only turns that hang
	// into a failure).
	returns := func(name string, f func() error) {
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s waited for its report line to be written", name)
		}
	}
	returns("Quiesce", func() error { return r.Quiesce(context.Background()) })
	bw.tokens <- struct{}{}
	out.settle()
	returns("Resume", func() error { return r.Resume(context.Background(), true) })
	job := make(chan struct{})
	go func() {
		fmt.Fprintf(out, "%sstep 5/9\n", Prefix)
		close(job)
	}()
	bw.tokens <- struct{}{}
	bw.tokens <- struct{}{}
	<-job
	out.settle()
	lines := strings.Split(strings.TrimSpace(bw.buf.String()), "\n")
	if len(lines) != 3 || lines[0] != Prefix+"quiesced" || !strings.HasPrefix(lines[1], Prefix+"resumed replugged=true") || lines[2] != Prefix+"step 5/9" {
		t.Errorf("lines %q: want quiesced, resumed, then the job's step", lines)
	}
}
