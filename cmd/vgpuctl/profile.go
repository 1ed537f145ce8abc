package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// setProfile moves an instance to another vGPU type at run time.
func setProfile(ctx context.Context, c *control.Client, args []string, w io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: set-profile UUID PROFILE")
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
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	const usage = "usage: limits UUID [-kernel-timeout D] [-slice D] [-build-timeout D] [-program-bytes N]"
	kernel := fs.Duration("kernel-timeout", 0, "longest one device turn may run, preempted time excluded (0: keep)")
	turn := fs.Duration("turn-timeout", 0, "former name of -kernel-timeout")
	slice := fs.Duration("slice", 0, "how long a turn may run while another domain waits before it is preempted (0: keep)")
	build := fs.Duration("build-timeout", 0, "longest one program build may take (0: keep)")
	prog := fs.Uint64("program-bytes", 0, "bytes of programs the instance may hold (0: keep)")
	if len(args) < 1 {
		return errors.New(usage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 || *kernel < 0 || *turn < 0 || *slice < 0 || *build < 0 {
		return errors.New(usage)
	}
	if *kernel == 0 {
		*kernel = *turn
	}
	in, err := c.SetLimits(ctx, args[0], mdev.Limits{KernelTimeout: mdev.Duration(*kernel), Slice: mdev.Duration(*slice),
		BuildTimeout: mdev.Duration(*build), ProgramBytes: *prog})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s kernel timeout %v, slice %v, build timeout %v, programs %d of %d bytes\n", in.UUID,
		in.Limits.KernelTimeout.D(), in.Limits.Slice.D(), in.Limits.BuildTimeout.D(), in.ProgramBytes, in.Limits.ProgramBytes)
	return nil
}
