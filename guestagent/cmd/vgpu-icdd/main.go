// Command vgpu-icdd is the privileged guest daemon behind the vgpud OpenCL
// ICD (docs/icd-protocol.md): it opens every vGPU of the guest with the Go
// driver (BAR0 through sysfs, DMA pages through /proc/self/pagemap, so it
// runs as root) and serves unprivileged applications on a SOCK_SEQPACKET
// Unix socket, by default /run/vgpud/icd.sock with mode 0666 (like a DRM
// render node: -mode and -group restrict it). The protocol logic is
// package guestagent/icdserver; this command only finds and opens the
// devices, makes the socket and registers with the guest agent.
//
// Migration: it registers one migration handler with the guest agent
// (agent.Client, through vgpu-agent's relay socket or the virtio-serial
// port, -agent), which suspends every device on Quiesce (the clients'
// requests then wait in the driver) and resumes each at its PCI slot on
// Resume; a device that comes back without its state is abandoned, and the
// clients' commands on it fail with abi status device-lost. It does not
// take part in reconfiguration (it declares no memory needs).
//
// Completion interrupts (-interrupts, docs/icd-protocol.md "Completion
// interrupts"): by default it binds each vGPU that has INTx to
// uio_pci_generic, so that a client's blocking wait that sleeps is woken
// by the vGPU's interrupt rather than by a reaper's timer; where the
// module is missing or the VMM delivers no interrupt, timers alone.
//
// Device lost: when vgpud ends the worker behind a vGPU (its watchdog, a
// crash), the server fails every client's commands in flight with abi
// status device-lost and resets the device, so later requests and clients
// work on a fresh device context (docs/icd-protocol.md "Device lost").
//
// It serves until SIGTERM or SIGINT, then closes every connection (waiting
// for their commands, freeing their objects), closes the devices and
// removes the socket.
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
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/icdproto"
	"github.com/vgpud/vgpud/guestagent/icdserver"
)

func main() {
	cmdmain.Main("vgpu-icdd", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stderr) }, os.Interrupt, syscall.SIGTERM)
}

// Hooks for tests.
var (
	findDevices  = driver.FindAllPCI
	openDevice   = driver.OpenGuest
	reopenDevice = driver.ReopenGuest
	uioLine      = func(dir string) (driver.IRQLine, error) { return driver.OpenUIOLine(dir) }
	portOpener   = func() func() (io.ReadWriteCloser, error) { return agent.OpenPort(agent.PortName) }
)

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vgpu-icdd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", icdproto.DefaultSocket, "Unix socket to serve")
	modeStr := fs.String("mode", "0666", "permissions of the socket, octal")
	group := fs.String("group", "", "group owning the socket (default: unchanged)")
	staging := fs.Int("staging", driver.DefaultStagingBytes, "DMA staging pool bytes per device")
	timeout := fs.Duration("timeout", driver.DefaultTimeout, "bound on each wait for a device, a client's Wait, and a closing client's commands")
	devices := fs.String("device", "", "comma-separated sysfs directories of the vGPUs (default: every vGPU in /sys/bus/pci/devices)")
	via := fs.String("agent", "auto", "agent channel for migration: relay (vgpu-agent's socket), port (the virtio-serial port), auto (relay if its socket exists, else port) or none")
	agentSock := fs.String("agent-socket", "", "vgpu-agent's relay socket (default: $VGPU_AGENT_SOCKET, else "+agent.DefaultRelaySocket+")")
	contexts := fs.String("contexts", "prefer", "a device context per client (ABI 1.5): prefer (where the vGPU offers them, else the shared ring), require (refuse a client that cannot get one) or off")
	queuePoll := fs.Duration("queue-poll", 0, "how long a client's connection looks at its empty submission queue before it sleeps on the socket (0: "+icdserver.DefaultQueuePoll.String()+", negative: never; docs/icd-protocol.md \"Submission queue\")")
	irqVia := fs.String("interrupts", "auto", "what the device reapers wake on besides their timers: uio (the vGPU's INTx through uio_pci_generic; docs/ABI.md \"Interrupts\"), auto (uio where the vGPU has INTx and uio_pci_generic binds, else timers alone) or none")
	verbose := fs.Bool("v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctxPolicy, err := icdserver.ParseContextPolicy(*contexts)
	if err != nil {
		return fmt.Errorf("-contexts: %w", err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch *irqVia {
	case "auto", "uio", "none":
	default:
		return fmt.Errorf("-interrupts %q: want auto, uio or none", *irqVia)
	}
	switch *via {
	case "auto", "relay", "port", "none":
	default:
		return fmt.Errorf("-agent %q: want auto, relay, port or none", *via)
	}
	mode, err := strconv.ParseUint(*modeStr, 8, 32)
	if err != nil || mode > 0o777 {
		return fmt.Errorf("-mode %q: want octal permissions such as 0660", *modeStr)
	}
	gid := -1
	if *group != "" {
		g, err := user.LookupGroup(*group)
		if err != nil {
			return fmt.Errorf("-group: %w", err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return fmt.Errorf("-group %s: gid %q", *group, g.Gid)
		}
	}
	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("prog", "vgpu-icdd")

	var dirs []string
	if *devices != "" {
		dirs = strings.Split(*devices, ",")
	} else if dirs, err = findDevices(); err != nil {
		if !errors.Is(err, driver.ErrNoDevice) {
			return err
		}
		log.Warn("no vGPU found: serving no devices", "err", err)
	}
	var devs []*driver.Device
	var irqs []*driver.Interrupts // index for index with devs; nil: timers alone
	defer func() {
		for _, irq := range irqs {
			if irq != nil {
				irq.Close()
			}
		}
		for _, d := range devs {
			d.Close()
		}
	}()
	for _, dir := range dirs {
		regs, mem, err := openDevice(dir)
		if err != nil {
			return fmt.Errorf("open vgpu %s: %w", dir, err)
		}
		d, err := driver.Open(regs, mem, driver.Options{StagingBytes: *staging, Timeout: *timeout, Logger: log})
		if err != nil {
			return fmt.Errorf("open vgpu %s: %w", dir, err)
		}
		in := d.Info()
		log.Info("vgpu open", "pci", dir, "profile", in.Profile, "device", in.Name, "abi", fmt.Sprintf("%d.%d", in.Version>>16, in.Version&0xffff))
		devs = append(devs, d)
		irq, err := openInterrupts(*irqVia, dir, d, log)
		if err != nil {
			return fmt.Errorf("vgpu %s: %w", dir, err)
		}
		irqs = append(irqs, irq)
	}

	l, err := listen(*sock, os.FileMode(mode), gid)
	if err != nil {
		return err
	}
	defer os.Remove(*sock)
	srv := icdserver.New(icdserver.Config{Devices: devs, Interrupts: irqs, Timeout: *timeout, Logger: log, Contexts: ctxPolicy, QueuePoll: *queuePoll})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	log.Info("serving", "socket", *sock, "devices", len(devs))

	if open := agentChannel(*via, *agentSock); open != nil && len(devs) > 0 {
		h := make(multiMigration, len(devs))
		for i, d := range devs {
			dir := dirs[i]
			h[i] = agent.DriverMigration(d, func(ctx context.Context) (driver.Registers, error) { return reopenDevice(ctx, dir) })
		}
		c := agent.New(open, agent.Options{Ident: "vgpu-icdd", Logger: log})
		c.HandleMigration(h)
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(actx) }()
		defer func() {
			cancel()
			<-done
		}()
	}

	select {
	case <-ctx.Done():
		w := srv.WaitStats()
		q := srv.QueueStats()
		var irqN, arms uint64
		for _, irq := range irqs {
			if irq != nil {
				n, a := irq.Count()
				irqN, arms = irqN+n, arms+a
			}
		}
		log.Info("stopping", "clients", srv.Conns(), "waits_polled", w.Polled, "waits_missed", w.Missed, "waits_slept", w.Slept,
			"irq_wakes", w.Interrupts, "interrupts", irqN, "interrupt_arms", arms,
			"queued", q.Queued, "socket", q.Socket, "kicks", q.Kicks, "queue_sleeps", q.Sleeps, "queue_polled", q.Polled)
	case err = <-served:
	}
	srv.Close()
	if err == nil {
		err = <-served
	}
	if errors.Is(err, icdserver.ErrServerClosed) {
		err = nil
	}
	return err
}

// listen makes the socket: its directory, no stale socket in the way, the
// mode and group asked for.
func listen(path string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another daemon is serving it", path)
		}
		os.Remove(path)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false) // removed by run, after the connections end
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// agentChannel returns how to reach the guest agent, or nil for none.
func agentChannel(via, sock string) func() (io.ReadWriteCloser, error) {
	if sock == "" {
		sock = os.Getenv("VGPU_AGENT_SOCKET")
	}
	if sock == "" {
		sock = agent.DefaultRelaySocket
	}
	switch via {
	case "auto":
		if _, err := os.Stat(sock); err == nil {
			return agent.DialRelay(sock)
		}
		return portOpener()
	case "relay":
		return agent.DialRelay(sock)
	case "port":
		return portOpener()
	}
	return nil
}

// multiMigration quiesces and resumes every device the daemon serves.
type multiMigration []agent.MigrationHandler

func (m multiMigration) Quiesce(ctx context.Context) error {
	for i, h := range m {
		if err := h.Quiesce(ctx); err != nil {
			// Let the devices already suspended go on.
			for _, done := range m[:i] {
				done.Resume(ctx, false) //nolint:errcheck // best effort; the quiesce failed anyway
			}
			return fmt.Errorf("device %d: %w", i, err)
		}
	}
	return nil
}

func (m multiMigration) Resume(ctx context.Context, replugged bool) error {
	var errs []error
	for i, h := range m {
		if err := h.Resume(ctx, replugged); err != nil {
			errs = append(errs, fmt.Errorf("device %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Lost abandons every device (agent.LostHandler).
func (m multiMigration) Lost(ctx context.Context) error {
	var errs []error
	for _, h := range m {
		if lh, ok := h.(agent.LostHandler); ok {
			errs = append(errs, lh.Lost(ctx))
		}
	}
	return errors.Join(errs...)
}

var _ agent.LostHandler = multiMigration(nil)

// openInterrupts gives the reapers of the vGPU at dir its completion
// interrupts (how: -interrupts), or nil where they sleep on timers alone.
// With auto a vGPU without INTx, or one uio_pci_generic does not bind
// (the module is not loaded), is served without; with uio that is an
// error. Where the VMM delivers no interrupt (x-pci-proxy-dev under TCG)
// nothing changes: the timers still run.
func openInterrupts(how, dir string, d *driver.Device, log *slog.Logger) (*driver.Interrupts, error) {
	if how == "none" {
		return nil, nil
	}
	if d.Info().Features&abi.FeatureINTx == 0 {
		if how == "uio" {
			return nil, fmt.Errorf("-interrupts uio: %w", driver.ErrNoINTx)
		}
		return nil, nil
	}
	line, err := uioLine(dir)
	if err == nil {
		var irq *driver.Interrupts
		if irq, err = driver.NewInterrupts(d, line, log); err == nil {
			log.Info("vgpu completion interrupts through uio_pci_generic", "pci", dir)
			return irq, nil
		}
	}
	if how == "uio" {
		return nil, fmt.Errorf("-interrupts uio: %w", err)
	}
	log.Info("vgpu completion interrupts not used: reapers poll on timers", "pci", dir, "err", err)
	return nil, nil
}
