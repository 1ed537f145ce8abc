// Command icdhost serves the ICD protocol (docs/icd-protocol.md) on the
// host, over a real vGPU and no VM, so that the C ICD's tests and
// OpenCL applications (clinfo, pyopencl) can run against the whole vgpud
// stack in seconds rather than in a booted guest:
//
//	go build -o build/icdhost ./tests/icdhost
//	build/icdhost -socket /tmp/icd.sock &        # prints "ready" when listening
//	VGPUD_ICD_SOCKET=/tmp/icd.sock OCL_ICD_VENDORS=build/icd clinfo
//
// It starts an in-process vgpud: mdev.NewManager over gpu.Open(-device,
// default $VGPUD_TEST_DEVICE) and the QEMU multi-process transport, creates
// an instance of -profile, plays the VM with mpqemutest.NewVM on the
// instance's socket (guest RAM in a memfd of -guest-mem bytes) and opens
// the device with the Go driver, as metrics' TestMetricsDuringRun does;
// then it serves icdserver on -socket and prints "ready" on stdout. It exits
// cleanly (closing the clients, the device, the instance and the manager,
// and removing the socket) on SIGTERM, SIGINT, or when stdin reaches end of
// file, so a test harness that dies takes it along.
//
// It is a test tool under tests/ because it imports dom0 packages (mdev,
// gpu), which guest programs must not.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/icdserver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/worker/child"
)

func main() {
	// A worker or executor of the pool this program runs.
	child.EnterRole()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "icdhost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("icdhost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", "", "Unix socket to serve the ICD protocol on (required)")
	device := fs.String("device", os.Getenv("VGPUD_TEST_DEVICE"), "physical device for gpu.Open (default $VGPUD_TEST_DEVICE; empty: the first OpenCL device)")
	profile := fs.String("profile", "vgpu-medium", "vGPU profile of the instance")
	guestMem := fs.Uint64("guest-mem", 256<<20, "bytes of simulated guest RAM (DMA staging comes out of it)")
	staging := fs.Int("staging", driver.DefaultStagingBytes, "driver DMA staging pool bytes")
	timeout := fs.Duration("timeout", driver.DefaultTimeout, "driver and server timeout")
	queuePoll := fs.Duration("queue-poll", 0, "how long a connection looks at its empty submission queue before it sleeps (0: icdserver's default, negative: never)")
	pollWindow := fs.Duration("poll-window", 0, "how long the worker's ring loops and executor connections poll before they block (mdev.Config.PollWindow: 0 the default, negative never)")
	interrupts := fs.Bool("interrupts", true, "reapers wake at the vGPU's completion interrupts (the irqfd), as vgpu-icdd's do on vfio-user; false: on their timers alone")
	turn := fs.Duration("turn-timeout", 0, "the instance's turn budget: vgpud's watchdog ends a worker whose kernel overruns it, and the device context is lost (0: the profile's)")
	verbose := fs.Bool("v", false, "debug logs on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the ICD server, vgpud's main process and the harness) to this file until it exits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *sock == "" || fs.NArg() != 0 {
		return errors.New("usage: icdhost -socket PATH [-device D] [-profile P]")
	}
	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("prog", "icdhost")

	dev, err := gpu.Open(*device)
	if err != nil {
		return fmt.Errorf("gpu.Open(%q): %w", *device, err)
	}
	defer dev.Close()
	sockDir, err := os.MkdirTemp("", "icdhost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockDir)
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: sockDir, Transport: mpqemu.Transport{}, PollWindow: *pollWindow})
	if err != nil {
		return err
	}
	defer m.Close()
	inst, err := m.Create(mdev.CreateRequest{Profile: *profile})
	if err != nil {
		return fmt.Errorf("create a %s instance: %w", *profile, err)
	}
	if *turn > 0 {
		if err := m.SetLimits(inst.UUID(), mdev.Limits{TurnTimeout: mdev.Duration(*turn)}); err != nil {
			return fmt.Errorf("turn budget %v: %w", *turn, err)
		}
	}
	vm, err := mpqemutest.Dial(inst.Socket(), *guestMem)
	if err != nil {
		return fmt.Errorf("play the VM: %w", err)
	}
	defer vm.Close()
	d, err := driver.Open(vm, vm, driver.Options{StagingBytes: *staging, Timeout: *timeout, Logger: log}) // as vgpu-icdd
	if err != nil {
		return fmt.Errorf("open the vGPU: %w", err)
	}
	defer d.Close()

	var irqs []*driver.Interrupts
	if *interrupts {
		line, err := vm.IRQLine()
		if err != nil {
			return fmt.Errorf("the vGPU's interrupt line: %w", err)
		}
		irq, err := driver.NewInterrupts(d, line, log)
		if err != nil {
			return fmt.Errorf("the vGPU's interrupts: %w", err)
		}
		defer irq.Close()
		irqs = append(irqs, irq)
	}

	os.Remove(*sock) // a stale socket of an earlier run
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: *sock, Net: "unixpacket"})
	if err != nil {
		return err
	}
	srv := icdserver.New(icdserver.Config{Devices: []*driver.Device{d}, Interrupts: irqs, Timeout: *timeout, Logger: log, QueuePoll: *queuePoll})
	defer srv.Close()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	in := d.Info()
	log.Info("serving", "socket", *sock, "profile", in.Profile, "device", in.Name,
		"abi", fmt.Sprintf("%d.%d", in.Version>>16, in.Version&0xffff))
	fmt.Fprintln(stdout, "ready")

	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin) //nolint:errcheck // any end means stop
		close(eof)
	}()
	select {
	case <-ctx.Done():
	case <-eof:
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	start := time.Now()
	srv.Close()
	w := srv.WaitStats()
	q := srv.QueueStats()
	log.Info("stopped", "took", time.Since(start), "waits_polled", w.Polled, "waits_missed", w.Missed, "waits_slept", w.Slept, "irq_wakes", w.Interrupts,
		"queued", q.Queued, "socket", q.Socket, "kicks", q.Kicks, "queue_sleeps", q.Sleeps, "queue_polled", q.Polled)
	return nil
}
