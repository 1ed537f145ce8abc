// Command vgpuctl is the operator CLI of vgpud: list devices and profiles,
// create, list, show and destroy vGPU instances, and start a QEMU VM with
// instances attached (printing the exact QEMU command line).
//
//	vgpuctl [-socket PATH] devices|profiles|list|show|create|destroy|vm ...
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "vgpuctl:", err)
		stop()
		os.Exit(exitCode(err))
	}
}

// guestExit is a guest program's non-zero exit status (vgpuctl vm).
type guestExit struct{ code int }

func (e guestExit) Error() string { return fmt.Sprintf("guest program exited with status %d", e.code) }

// exitCode is vgpuctl's exit status for err: 2 for a command line it
// cannot run, a guest program's own status (1..255; anything else 1),
// else 1.
func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	var g guestExit
	if errors.As(err, &g) && g.code >= 1 && g.code <= 255 {
		return g.code
	}
	return 1
}
