// Command vgpu-init is the /init of the vgpud test guest
// (docs/guest-image.md). It mounts /proc, /sys, /dev (devtmpfs) and /tmp,
// loads the kernel modules found in /lib/modules (virtio and uio first, in
// dependency order), runs /bin/<vgpu.run> with the comma-separated
// vgpu.args from the kernel command line, its output on the console, prints
//
//	VGPU-INIT exit=<code>
//
// and powers the machine off. Whatever goes wrong (no program, a failed
// start, a panic) it prints a "VGPU-INIT error: ..." line, then
// "VGPU-INIT exit=-1", and powers off: the VM never hangs in the init.
//
// It must be built static (CGO_ENABLED=0). It refuses to run unless it is
// process 1, so running it by mistake on a host does nothing.
package main

import (
	"fmt"
	"os"
)

// Console markers the host side waits for.
const (
	markerExit  = "VGPU-INIT exit="
	markerError = "VGPU-INIT error: "
	markerRun   = "VGPU-INIT run="
	// markerVGPU: vgpu.wait saw the vGPU (its PCI address follows).
	markerVGPU = "VGPU-INIT vgpu="
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "vgpu-init: not process 1; this is the guest's /init, refusing to run")
		os.Exit(2)
	}
	code := -1
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("%spanic: %v\n", markerError, r)
			code = -1
		}
		fmt.Printf("%s%d\n", markerExit, code)
		powerOff()
	}()
	code = boot()
}
