// Command vgpu-agent is the guest agent daemon: it owns the virtio-serial
// port of the agent channel to vgpud (agent.PortName), reopens it whenever
// the host side restarts, reports the guest's /proc/stat, and relays
// completion wake-ups and the host's vCPU hints to guest programs over a
// Unix socket (agent.DefaultRelaySocket), where they use agent.DialRelay.
// It answers the host's migration requests (Quiesce, Resume) for the
// programs that registered a handler (agent.Client.HandleMigration), and
// announces agentmsg.FeatureMigration to the host; likewise the
// reconfiguration requests (Checkpoint, Reconfigure) for the programs that
// registered for them (agent.Client.HandleReconfig), whose declared
// resources it sends the host, announcing agentmsg.FeatureReconfig while
// there is one.
//
// With arguments after the flags it runs them as a child once the channel
// is up and exits with the child's status (so a guest init that runs one
// program can run "vgpu-agent prog args...").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/guestagent/agent"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-agent:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("vgpu-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.String("port", agent.PortName, "virtio-serial port `name` of the channel to vgpud")
	sock := fs.String("socket", agent.DefaultRelaySocket, "Unix socket `path` guest programs connect to")
	stats := fs.Duration("stats", time.Second, "how often to report /proc/stat to vgpud (0: never)")
	wait := fs.Duration("wait", 30*time.Second, "with a command: how long to wait for the host before starting it anyway")
	verbose := fs.Bool("v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("prog", "vgpu-agent")

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := agent.New(agent.OpenPort(*port), agent.Options{Ident: "vgpu-agent", StatsEvery: *stats, Logger: log})
	// The relay before the channel: it answers the host's migration
	// requests, which the first Hello then announces.
	relay, err := agent.NewRelay(c, *sock, log)
	if err != nil {
		return 1, err
	}
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	relayErr := make(chan error, 1)
	go func() { relayErr <- relay.Serve(ctx) }()
	defer func() {
		cancel()
		relay.Close()
		<-relayErr
		<-runErr
	}()

	if fs.NArg() == 0 {
		<-ctx.Done()
		return 0, nil
	}
	wctx, wcancel := context.WithTimeout(ctx, *wait)
	if err := c.WaitReady(wctx); err != nil {
		log.Warn("host channel not up; starting the command anyway", "err", err)
	}
	wcancel()
	cmd := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "VGPU_AGENT_SOCKET="+*sock)
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("run %s: %w", fs.Arg(0), err)
	}
	return 0, nil
}
