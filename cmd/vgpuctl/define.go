package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/definitions"
)

// defineCmd writes a persistent instance definition (created at every
// start of vgpud when missing; -create also now).
func defineCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("define", stderr)
	var d definitions.Definition
	fs.StringVar(&d.Name, "name", "", "the instance's name, and the definition's (required)")
	fs.StringVar(&d.Profile, "profile", "", "vGPU type (required; see vgpuctl profiles)")
	fs.StringVar(&d.UUID, "uuid", "", "the instance's UUID (default: made up once, kept in the definition)")
	dev := fs.Int("device", -1, "physical device index (default: placed at each creation)")
	fs.StringVar(&d.ReuseDomain, "reuse-domain", "", "result-reuse domain shared with other instances (default: private)")
	fs.BoolVar(&d.NoReuse, "no-reuse", false, "turn result reuse off for the instance")
	labels := labelFlags{}
	fs.Var(labels, "label", "a KEY=VALUE label; repeatable")
	create := fs.Bool("create", false, "also create the instance now if it does not exist")
	asJSON := fs.Bool("json", false, "print the definition as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("define: unexpected argument %q", fs.Arg(0))
	}
	if d.Name == "" || d.Profile == "" {
		return usagef("define: -name and -profile are required")
	}
	devSet := false
	fs.Visit(func(f *flag.Flag) { devSet = devSet || f.Name == "device" })
	if devSet {
		if *dev < 0 {
			return usagef("define: -device %d refused: a device index is 0 or more", *dev)
		}
		d.Device = dev
	}
	if len(labels) > 0 {
		d.Labels = labels
	}
	rep, err := c.Define(ctx, d, *create)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, rep)
	}
	fmt.Fprintf(w, "defined %s (uuid %s, profile %s)\n", rep.Definition.Name, rep.Definition.UUID, rep.Definition.Profile)
	if rep.Created != "" {
		fmt.Fprintf(w, "created %s\n", rep.Created)
	}
	return nil
}

// undefineCmd removes a persistent definition; its instance stays until
// destroyed.
func undefineCmd(ctx context.Context, c *control.Client, args []string, w io.Writer) error {
	if len(args) != 1 {
		return usagef("usage: undefine NAME")
	}
	if err := c.Undefine(ctx, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(w, "undefined %s (an instance of it stays until vgpuctl destroy %s)\n", args[0], args[0])
	return nil
}

// definitionsCmd lists the persistent definitions.
func definitionsCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	asJSON, err := listFlags("definitions", args, stderr)
	if err != nil {
		return err
	}
	rep, err := c.Definitions(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, rep)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tUUID\tPROFILE\tDEV\tLABELS")
	for _, d := range rep.Definitions {
		dev := "-"
		if d.Device != nil {
			dev = fmt.Sprint(*d.Device)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.UUID, d.Profile, dev, orDash(labelFlags(d.Labels).String()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(w, "not used:", e)
	}
	if len(rep.Definitions) == 0 && len(rep.Errors) == 0 {
		fmt.Fprintf(w, "(none in %s)\n", strings.TrimSpace(rep.Dir))
	}
	return nil
}
