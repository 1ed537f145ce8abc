package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vgpud/vgpud/mdev/control"
)

func upgradeCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("upgrade", stderr)
	var req control.UpgradeRequest
	fs.StringVar(&req.Binary, "binary", "", "the new vgpud (default: the file the running one was started from)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage: upgrade [-binary PATH] [-json]")
	}
	rep, err := c.Upgrade(ctx, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, rep)
	}
	fmt.Fprintf(w, "upgraded in place: vgpud pid %d -> %d (%s), %d instances, %d workers; paused %s, took %s\n",
		rep.OldPID, rep.NewPID, rep.Binary, rep.Instances, rep.Workers, ms(rep.Paused), ms(rep.Took))
	return nil
}
