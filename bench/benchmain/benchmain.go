// Package benchmain is the main function the benchmark programs share:
// each is also a worker or an executor of the pool it runs (the role its
// parent names on the command line), stops at an interrupt, and reports
// a failure as one line and exit status 1.
package benchmain

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"

	"github.com/vgpud/vgpud/worker/child"
)

// Run is a benchmark's body: its arguments (without the program's name),
// where its table goes and where its progress goes.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run as program name: it first becomes the worker or executor
// the command line names, if it names one (and then never returns);
// otherwise it runs run until it returns or an interrupt cancels its
// context, and exits 1 with "name: error" on standard error if it failed.
func Main(name string, run Run) {
	child.EnterRole()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	endProfile, err := startProfile(os.Getenv(EnvCPUProfile))
	if err == nil {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		if perr := endProfile(); err == nil {
			err = perr
		}
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// EnvCPUProfile, if set, names the file a benchmark writes its process's
// CPU profile to (go tool pprof; the workers and executors it starts are
// not in it): where the time of a path goes, hop by hop inside vgpud's
// own process (bench/README.md).
const EnvCPUProfile = "VGPUD_BENCH_CPUPROFILE"

// startProfile starts a CPU profile into path ("": none) and returns
// what ends it.
func startProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// Stdout adapts a body that writes only to standard output.
func Stdout(run func(ctx context.Context, args []string, stdout io.Writer) error) Run {
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error { return run(ctx, args, stdout) }
}

// Parse parses a benchmark's command line, args, with fs: flags only, no
// further arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}
