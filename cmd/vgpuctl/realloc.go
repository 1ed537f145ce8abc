package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// reallocCmd moves an instance to another device or profile of this
// daemon (-device, -profile), or to another host (-to: a live migration).
func reallocCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("realloc", stderr)
	dev := fs.Int("device", -1, "the physical device to move to (default: stay)")
	profile := fs.String("profile", "", "the vGPU type to move to (default: keep)")
	deadline := fs.Duration("deadline", 0, "how long the guest's programs may take to checkpoint, and to resume (default 30s)")
	to := fs.String("to", "", "another vgpud's migration listener, HOST:PORT: a live migration there (needs -uri)")
	uri := fs.String("uri", "", "with -to: the destination QEMU's -incoming URI")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	const use = "usage: realloc UUID [-device N] [-profile P] [-deadline D] | realloc UUID -to HOST:PORT -uri QEMU-URI"
	id, err := parseUUIDCmd(fs, args)
	if err != nil {
		return err
	}
	if id == "" {
		return errors.New(use)
	}
	if *to != "" {
		if *uri == "" || *dev >= 0 || *profile != "" {
			return errors.New(use)
		}
		rep, err := c.Migrate(ctx, id, control.MigrateRequest{To: *to, URI: *uri})
		return showMigration(w, rep, err, *asJSON)
	}
	req := mdev.ReallocRequest{Profile: *profile, Deadline: mdev.Duration(*deadline)}
	if *dev >= 0 {
		req.Device = dev
	}
	if req.Device == nil && req.Profile == "" {
		return errors.New(use)
	}
	res, err := c.Realloc(ctx, id, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, res)
	}
	how := fmt.Sprintf("%d guest programs checkpointed and resumed", res.Programs)
	if res.Transparent {
		how = "transparently (no guest program took part)"
	}
	fmt.Fprintf(w, "%s: device %d %s -> device %d %s, %s\n", id, res.From, res.FromProfile, res.To, res.ToProfile, how)
	fmt.Fprintf(w, "state %s, ring stopped %v, checkpoint %v, resume %v, total %v\n", mib(res.StateBytes),
		res.Stopped.D().Round(time.Millisecond), res.Checkpoint.D().Round(time.Millisecond),
		res.Resume.D().Round(time.Millisecond), res.Total.D().Round(time.Millisecond))
	return nil
}

// resourcesCmd shows what an instance's guest programs declared and what
// it holds.
func resourcesCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("resources", stderr)
	asJSON := fs.Bool("json", false, "print as JSON")
	id, err := parseUUIDCmd(fs, args)
	if err != nil {
		return err
	}
	if id == "" {
		return errors.New("usage: resources UUID [-json]")
	}
	r, err := c.Resources(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, r)
	}
	fmt.Fprintf(w, "%s on device %d, profile %s: quota %s, holds %s, peak %s since %s\n", r.UUID, r.Device, r.Profile,
		mib(r.Quota), mib(r.Used), mib(r.Peak), r.PeakSince.Format(time.RFC3339))
	fmt.Fprintf(w, "device: %s of %s free, %d compute units\n", mib(r.DevFree), mib(r.DevMem), r.CUs)
	fmt.Fprintf(w, "overcommit: %s (timeout %v); %d migrations, %d suspensions, %d failed moves", orNone(string(r.Policy.Policy)),
		r.Policy.Timeout.D(), r.Stats.Migrations, r.Stats.Suspensions, r.Stats.Failed)
	switch {
	case r.Stats.Suspended:
		fmt.Fprint(w, "; SUSPENDED to host memory")
	case r.Moving:
		fmt.Fprint(w, "; moving")
	}
	fmt.Fprintln(w)
	if len(r.Declared) == 0 {
		fmt.Fprintln(w, "declared: nothing (no guest program registered for reconfiguration)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tPROGRAM\tMIN MEM\tPREF MEM\tMIN CU\tPREF CU")
		for _, d := range r.Declared {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\n", d.PID, d.Name, mib(d.MinMem), mib(d.PrefMem), d.MinCUs, d.PrefCUs)
		}
		tw.Flush()
	}
	if p := r.Proposal; p != nil {
		fmt.Fprintf(w, "proposal: downgrade %s -> %s (peak %s; gives back %s): vgpuctl realloc %s -profile %s\n",
			p.From, p.To, mib(p.Peak), mib(p.Saving), r.UUID, p.To)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// overcommitCmd sets an instance's (or, -profile, a vGPU type's)
// overcommit policy.
func overcommitCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("overcommit", stderr)
	profile := fs.String("profile", "", "set the default of this vGPU type instead of one instance's")
	timeout := fs.Duration("timeout", 0, "how long a blocked allocation waits (default 30s)")
	const use = "usage: overcommit UUID|-profile P [none|block|migrate|suspend|profile [-timeout D]]"
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	o := mdev.Overcommit{Timeout: mdev.Duration(*timeout)}
	switch {
	case *profile == "" && len(pos) == 1:
		// No policy: the instance's current one.
		r, err := c.Resources(ctx, pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: overcommit %s (timeout %v)\n", r.UUID, orNone(string(r.Policy.Policy)), r.Policy.Timeout.D())
	case *profile != "" && len(pos) == 0:
		ps, err := c.Profiles(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Name == *profile {
				fmt.Fprintf(w, "profile %s: overcommit %s (timeout %v)\n", p.Name, orNone(string(p.Overcommit.Policy)), p.Overcommit.Timeout.D())
				return nil
			}
		}
		return fmt.Errorf("overcommit: %w %q", mdev.ErrUnknownProfile, *profile)
	case *profile != "" && len(pos) == 1:
		o.Policy = mdev.OvercommitPolicy(pos[0])
		if err := c.SetProfileOvercommit(ctx, *profile, o); err != nil {
			return err
		}
		fmt.Fprintf(w, "profile %s: overcommit %s\n", *profile, o.Policy)
	case *profile == "" && len(pos) == 2:
		if pos[1] != "profile" { // "profile": follow the profile's
			o.Policy = mdev.OvercommitPolicy(pos[1])
		}
		if err := c.SetOvercommit(ctx, pos[0], o); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: overcommit %s\n", pos[0], orNone(string(o.Policy)))
	default:
		return usagef("%s", use)
	}
	return nil
}

// proposalsCmd lists the downgrades the policy proposes.
func proposalsCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("proposals", stderr)
	window := fs.Duration("window", 10*time.Minute, "how long the peak must have stayed below the smaller profile")
	asJSON := fs.Bool("json", false, "print as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ps, err := c.Proposals(ctx, *window)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, ps)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UUID\tFROM\tTO\tPEAK\tSINCE\tGIVES BACK")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.UUID, p.From, p.To, mib(p.Peak), p.Since.Format(time.RFC3339), mib(p.Saving))
	}
	return tw.Flush()
}
