package main

import (
	"context"
	"fmt"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
)

// repeated returns a run of the correctness suite n times with the same
// inputs (-mode reuse): a deterministic repeated job whose launches vgpud
// may answer from its result-reuse table (docs/reuse.md). Every repetition
// checks its results against the CPU reference; case names carry "#k".
func repeated(n int) func(context.Context, *driver.Device, suite.Options) suite.Report {
	return func(ctx context.Context, d *driver.Device, o suite.Options) suite.Report {
		out := suite.Report{Mode: "reuse"}
		for k := 1; k <= n && ctx.Err() == nil; k++ {
			r := suite.Run(ctx, d, o)
			for _, c := range r.Cases {
				c.Name = fmt.Sprintf("%s#%d", c.Name, k)
				out.Cases = append(out.Cases, c)
			}
			out.Pass += r.Pass
			out.Fail += r.Fail
			out.Device, out.Profile, out.Commands, out.Doorbells = r.Device, r.Profile, r.Commands, r.Doorbells
		}
		return out
	}
}
