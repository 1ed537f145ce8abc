package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// setProfile moves an instance to another vGPU type at run time.
func setProfile(ctx context.Context, c *control.Client, args []string, w io.Writer) error {
	if len(args) != 2 {
		return usagef("usage: set-profile UUID PROFILE")
	}
	in, err := c.SetProfile(ctx, args[0], args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s profile %s (%s)\n", in.UUID, in.Profile.Name, mib(in.Profile.MemBytes))
	return nil
}

// setLimits changes an instance's time budgets and program quota.
func setLimits(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("limits", stderr)
	const usage = "usage: limits UUID [-kernel-timeout D] [-slice D] [-build-timeout D] [-program-bytes N]"
	kernel := fs.Duration("kernel-timeout", 0, "longest one device turn may run, preempted time excluded (default: keep)")
	turn := fs.Duration("turn-timeout", 0, "former name of -kernel-timeout")
	slice := fs.Duration("slice", 0, "how long a turn may run while another domain waits before it is preempted (default: keep)")
	build := fs.Duration("build-timeout", 0, "longest one program build may take (default: keep)")
	prog := fs.Uint64("program-bytes", 0, "bytes of programs the instance may hold (default: keep)")
	id, err := parseUUIDCmd(fs, args)
	if err != nil {
		return err
	}
	if id == "" {
		return usagef("%s", usage)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"kernel-timeout", *kernel}, {"turn-timeout", *turn}, {"slice", *slice}, {"build-timeout", *build}} {
		if d.v < 0 || (d.v == 0 && set[d.name]) {
			return usagef("limits: -%s %v refused: a time budget must be positive (leave the flag out to keep the current one)", d.name, d.v)
		}
	}
	if *prog == 0 && set["program-bytes"] {
		return usagef("limits: -program-bytes 0 refused: the program quota must be positive (leave the flag out to keep it)")
	}
	if *kernel == 0 {
		*kernel = *turn
	}
	in, err := c.SetLimits(ctx, id, mdev.Limits{KernelTimeout: mdev.Duration(*kernel), Slice: mdev.Duration(*slice),
		BuildTimeout: mdev.Duration(*build), ProgramBytes: *prog})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s kernel timeout %v, slice %v, build timeout %v, programs %d of %d bytes\n", in.UUID,
		in.Limits.KernelTimeout.D(), in.Limits.Slice.D(), in.Limits.BuildTimeout.D(), in.ProgramBytes, in.Limits.ProgramBytes)
	return nil
}
