// Command vgpuctl is the operator CLI of vgpud: list devices and profiles,
// create, list, show and destroy vGPU instances, and start a QEMU VM with
// instances attached (printing the exact QEMU command line).
//
//	vgpuctl [-socket PATH] devices|profiles|list|show|create|destroy|vm ...
package main

import (
	"context"
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
		os.Exit(1)
	}
}
