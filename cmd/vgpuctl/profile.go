package main

import (
	"context"
	"errors"
	"fmt"
	"io"

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
