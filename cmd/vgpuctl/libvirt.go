package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/migrate/libvirt"
)

func attachCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("attach", stderr)
	var req control.AttachRequest
	var xreq control.XenAttachRequest
	fs.StringVar(&req.Libvirt, "libvirt", "", "the libvirt domain (name, id or UUID) that gets the vGPU")
	xenDom := fs.Uint("xen", 0, "the Xen HVM domain id that gets the vGPU")
	fs.StringVar(&xreq.PCI, "pci", "", "with -xen: the guest PCI slot the vGPU claims, bb:dd.f")
	fs.IntVar(&xreq.VCPUs, "vcpus", 0, "with -xen: vCPUs to serve (0: ask Xen)")
	fs.Uint64Var(&xreq.RAMBytes, "ram", 0, "with -xen: the guest's memory in bytes (xl.cfg maxmem=, else memory=); without it the vGPU cannot reach guest RAM")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	id, err := parseUUIDCmd(fs, args)
	if err != nil {
		return err
	}
	const use = "usage: attach -libvirt DOMAIN UUID [-json] | attach -xen DOMID -pci BB:DD.F UUID [-vcpus N] [-ram BYTES]"
	switch {
	case id == "" || (req.Libvirt == "") == (*xenDom == 0):
		return errors.New(use)
	case *xenDom != 0:
		if xreq.PCI == "" || *xenDom > 0x7fef {
			return errors.New(use)
		}
		xreq.Domain = uint32(*xenDom)
		if err := c.AttachXen(ctx, id, xreq); err != nil {
			return err
		}
		fmt.Fprintf(w, "instance %s served to Xen domain %d at %s\n", id, xreq.Domain, xreq.PCI)
		return nil
	}
	rep, err := c.Attach(ctx, id, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, rep)
	}
	printAttach(w, rep)
	return nil
}

func printAttach(w io.Writer, r *libvirt.Report) {
	var how string
	switch r.Action {
	case libvirt.ActionStarted:
		how = "started it paused, plugged the vGPU, resumed it"
	case libvirt.ActionHotplugged:
		how = "hot-plugged the vGPU"
	case libvirt.ActionDefined:
		how = "added the vGPU (vfio-user-pci) to its definition and started it"
	case libvirt.ActionReattached:
		how = fmt.Sprintf("replaced the vGPU on a dead socket; guest programs told of the loss: %d", r.Programs)
	default:
		how = string(r.Action)
	}
	fmt.Fprintf(w, "attached %s to libvirt domain %s at slot %#x in %s: %s", r.Instance, r.Domain, r.Slot, ms(r.Took), how)
	if r.AgentErr != "" {
		fmt.Fprintf(w, " (guest agent: %s)", r.AgentErr)
	}
	fmt.Fprintln(w)
	if r.MetadataErr != "" {
		fmt.Fprintf(w, "WARNING: the domain's metadata does not name the instance (%s): vgpud will not re-plug it by itself\n", r.MetadataErr)
	} else {
		fmt.Fprintf(w, "recorded in the domain's metadata (%s): vgpud -libvirt plugs it whenever the domain starts\n", libvirt.MetadataURI)
	}
}
