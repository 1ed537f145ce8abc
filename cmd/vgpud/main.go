// Command vgpud is the vGPU daemon: it opens the physical OpenCL devices,
// serves each vGPU instance to QEMU on its own socket and the operator API
// on a control socket.
//
//	vgpud [-config FILE] [-device SELECTOR]... [-run-dir DIR] [-log-level LEVEL]
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vgpud/vgpud/mdev/keeper"
	"github.com/vgpud/vgpud/worker/child"
	"github.com/vgpud/vgpud/worker/sandbox"
)

func main() {
	// A worker or executor of the pool this program runs, or its
	// connection keeper.
	child.EnterRole()
	keeper.EnterRole(keeperFarewells)
	// Before anything else, and before any exec: what vgpud inherited
	// without close-on-exec must not reach workers and executors (issue
	// 40, item 5; its own inherited descriptors, an upgrade's handover,
	// it opens by number).
	if err := sandbox.CloseInheritedOnExec(); err != nil {
		fmt.Fprintln(os.Stderr, "vgpud:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "vgpud:", err)
		if errors.Is(err, errBadUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
