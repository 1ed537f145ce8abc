package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/vgpud/vgpud/mdev/control"
)

func stats(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("stats", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, st)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEV\tNAME\tPOLICY\tINSTANCES\tTURNS\tBUSY")
	for _, d := range st.Devices {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%.3fs\n", d.Index, d.Name, d.Policy, d.Instances, d.Turns, float64(d.HeldNanos)/1e9)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "UUID\tPROFILE\tDEV\tSHARE\tCOMMANDS\tERRORS\tLAUNCHES\tKERNEL\tDEVICE\tWAIT\tTURNS\tSLICES\tTO DEV\tFROM DEV")
	for _, in := range st.Instances {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.3fs\t%.3fs\t%.3fs\t%d\t%d\t%s\t%s\n", in.UUID, in.Profile.Name, in.Device,
			in.Sched.Share, in.Stats.Commands, in.Stats.Errors, in.Stats.Launches, float64(in.Stats.KernelNanos)/1e9,
			float64(in.Sched.DeviceNanos)/1e9, float64(in.Sched.WaitNanos)/1e9, in.Sched.Turns, in.Sched.Slices,
			mib(in.Stats.BytesToDev), mib(in.Stats.BytesFromDev))
	}
	return tw.Flush()
}

func policy(ctx context.Context, c *control.Client, args []string, w io.Writer) error {
	if len(args) < 1 || len(args) > 2 {
		return errors.New("usage: policy DEVICE [NAME]")
	}
	dev, err := strconv.Atoi(args[0])
	if err != nil {
		return fmt.Errorf("policy: device %q: want an index", args[0])
	}
	if len(args) == 2 {
		if err := c.SetPolicy(ctx, dev, args[1]); err != nil {
			return err
		}
	}
	p, err := c.Policy(ctx, dev)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, p)
	return nil
}

func setShare(ctx context.Context, c *control.Client, args []string, w io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: set-share UUID N")
	}
	n, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil {
		return fmt.Errorf("set-share: share %q: %w", args[1], err)
	}
	in, err := c.SetShare(ctx, args[0], uint32(n))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s share %d\n", in.UUID, in.Sched.Share)
	return nil
}

// top refreshes a view of the devices and instances every interval until
// q, ctrl-c (ctx) or n frames.
func top(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("top", stderr)
	n := fs.Int("n", 0, "frames to show before exiting (0: until q or ctrl-c)")
	interval := fs.Duration("interval", time.Second, "refresh interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interval <= 0 || *n < 0 {
		return fmt.Errorf("top: -interval %v, -n %d: want positive values", *interval, *n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clear := false
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		clear = true
		if restore, err := watchQuit(os.Stdin, cancel); err == nil {
			defer restore()
		}
	}
	prev, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for frame := 1; *n == 0 || frame <= *n; frame++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := c.Stats(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if clear {
			fmt.Fprint(w, "\x1b[H\x1b[2J")
		}
		if err := renderTop(w, prev, cur); err != nil {
			return err
		}
		prev = cur
	}
	return nil
}

// renderTop prints one frame: rates over the interval between prev and cur.
func renderTop(w io.Writer, prev, cur control.StatsReply) error {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1e-9
	}
	before := make(map[string]control.InstanceStats, len(prev.Instances))
	for _, in := range prev.Instances {
		before[in.UUID] = in
	}
	devBefore := make(map[int]control.DeviceStats, len(prev.Devices))
	for _, d := range prev.Devices {
		devBefore[d.Index] = d
	}
	// Device time charged on each device during the interval.
	devTime := make(map[int]float64)
	for _, in := range cur.Instances {
		devTime[in.Device] += float64(in.Sched.DeviceNanos - before[in.UUID].Sched.DeviceNanos)
	}
	fmt.Fprintf(w, "vgpud top  %s  interval %.1fs  (q quits)\n\n", cur.Time.Format(time.TimeOnly), dt)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEV\tNAME\tPOLICY\tUTIL\tTURNS/S\tINSTANCES")
	for _, d := range cur.Devices {
		b := devBefore[d.Index]
		util := float64(d.HeldNanos-b.HeldNanos) / 1e9 / dt * 100
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f%%\t%.0f\t%d\n", d.Index, d.Name, d.Policy, min(util, 100), float64(d.Turns-b.Turns)/dt, d.Instances)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "UUID\tPROFILE\tDEV\tSHARE\tCMDS/S\tDEVICE TIME\tKERNEL/S\tWAIT/TURN\tCOPY MiB/S\tERRORS\tMEM USED")
	for _, in := range cur.Instances {
		b := before[in.UUID]
		share := "-"
		if t := devTime[in.Device]; t > 0 {
			share = fmt.Sprintf("%.1f%%", float64(in.Sched.DeviceNanos-b.Sched.DeviceNanos)/t*100)
		}
		wait := "-"
		if turns := in.Sched.Turns - b.Sched.Turns; turns > 0 {
			wait = time.Duration((in.Sched.WaitNanos - b.Sched.WaitNanos) / turns).Round(time.Microsecond).String()
		}
		copied := float64(in.Stats.BytesToDev+in.Stats.BytesFromDev-b.Stats.BytesToDev-b.Stats.BytesFromDev) / (1 << 20) / dt
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%s\t%.0f ms\t%s\t%.1f\t%d\t%s\n", in.UUID, in.Profile.Name, in.Device, in.Sched.Share,
			float64(in.Stats.Commands-b.Stats.Commands)/dt, share, float64(in.Stats.KernelNanos-b.Stats.KernelNanos)/1e6/dt,
			wait, copied, in.Stats.Errors, mib(in.MemUsed))
	}
	return tw.Flush()
}
