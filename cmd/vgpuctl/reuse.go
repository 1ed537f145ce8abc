package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

const reuseUsage = `usage: vgpuctl reuse [-json]            domains and per-instance reuse counters
       vgpuctl reuse set UUID DOMAIN|private|off
       vgpuctl reuse budget DOMAIN BYTES|unpin`

// reuseCmd is `vgpuctl reuse ...` (result reuse, docs/reuse.md).
func reuseCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "set":
			if len(args) != 3 {
				return errors.New(reuseUsage)
			}
			var s mdev.ReuseSetting
			switch args[2] {
			case "off":
				s.Off = true
			case "private":
			default:
				s.Domain = args[2]
			}
			info, err := c.SetReuse(ctx, args[1], s)
			if err != nil {
				return err
			}
			dom := "off"
			if info.Reuse != nil && info.Reuse.Domain != "" {
				dom = info.Reuse.Domain
			}
			fmt.Fprintf(w, "%s reuse %s\n", info.UUID, dom)
			return nil
		case "budget":
			if len(args) != 3 {
				return errors.New(reuseUsage)
			}
			n := int64(-1)
			if args[2] != "unpin" {
				var err error
				if n, err = strconv.ParseInt(args[2], 10, 64); err != nil || n < 0 {
					return fmt.Errorf("reuse budget: %q: want a byte count or unpin", args[2])
				}
			}
			d, err := c.SetReuseBudget(ctx, args[1], n)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s budget %d\n", d.Name, d.Budget)
			return nil
		}
	}
	fs := newFlags("reuse", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New(reuseUsage)
	}
	r, err := c.Reuse(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tSHARED\tUSERS\tENTRIES\tBYTES\tBUDGET\tHITS\tMISSES\tSKIPPED\tEVICTIONS\tSAVED\tDEVICE SAVED")
	for _, d := range r.Domains {
		budget := mib(uint64(d.Budget))
		if d.Pinned {
			budget += " (pinned)"
		}
		fmt.Fprintf(tw, "%s\t%t\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%.3fs\n", d.Name, d.Shared, d.Users, d.Entries,
			mib(uint64(d.Bytes)), budget, d.Hits, d.Misses, d.Skipped, d.Evictions, mib(d.BytesSaved), float64(d.DeviceNanos)/1e9)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "UUID\tDOMAIN\tHITS\tMISSES\tSKIPPED\tRECORDED\tSAVED\tDEVICE SAVED")
	for _, in := range r.Instances {
		dom := in.Domain
		if dom == "" {
			dom = "off"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%.3fs\n", in.UUID, dom, in.Hits, in.Misses, in.Skipped, in.Recorded,
			mib(in.BytesSaved), float64(in.DeviceNanos)/1e9)
	}
	return tw.Flush()
}
