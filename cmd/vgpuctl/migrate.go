package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/migrate"
)

func migrateCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	var req control.MigrateRequest
	fs.StringVar(&req.To, "to", "", "the destination vgpud's migration listener, HOST:PORT")
	fs.StringVar(&req.URI, "uri", "", "the destination QEMU's -incoming URI (tcp:HOST:PORT or unix:PATH)")
	fs.StringVar(&req.QMP, "qmp", "", "the source QEMU's QMP socket (default: <run-dir>/instances/UUID.qmp)")
	fs.StringVar(&req.DeviceID, "device-id", "", "the vGPU's QEMU device id (default vgpu0)")
	fs.IntVar(&req.MaxRounds, "rounds", 0, "most pre-copy rounds (default 5)")
	fs.BoolVar(&req.NoPrecopy, "no-precopy", false, "copy the device state only once the guest is quiesced")
	fs.BoolVar(&req.QuiesceFirst, "quiesce-first", false, "quiesce the guest before QEMU copies the VM, even where the vGPU could run meanwhile (vfio-user)")
	fs.Uint64Var(&req.QEMUBandwidth, "qemu-bandwidth", 0, "cap QEMU's migration of the VM's RAM, MiB/s (default: no cap; the vGPU is unplugged meanwhile)")
	fs.StringVar(&req.Libvirt, "libvirt", "", "the VM's libvirt domain: libvirt moves it (virsh migrate --live; vfio-user only), -uri is then its --migrateuri (optional)")
	fs.StringVar(&req.LibvirtTo, "libvirt-to", "", "with -libvirt: the destination libvirtd's URI")
	fs.StringVar(&req.DestRunDir, "dest-run-dir", "", "with -libvirt: the destination vgpud's run directory, if not this one's")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	id, err := parseUUIDCmd(fs, args)
	if err != nil {
		return err
	}
	if id == "" || req.To == "" || (req.URI == "" && req.Libvirt == "") || (req.Libvirt == "") != (req.LibvirtTo == "") {
		return errors.New("usage: migrate UUID -to HOST:PORT -uri QEMU-URI | migrate UUID -to HOST:PORT -libvirt DOMAIN -libvirt-to URI [-uri MIGRATE-URI] [-dest-run-dir DIR]")
	}
	req.QEMUBandwidth <<= 20
	rep, err := c.Migrate(ctx, id, req)
	return showMigration(w, rep, err, *asJSON)
}

// showMigration prints a migration's report (there may be one with an
// error) and returns the error.
func showMigration(w io.Writer, rep *migrate.Report, err error, asJSON bool) error {
	if rep != nil {
		if asJSON {
			if perr := printJSON(w, rep); perr != nil {
				return perr
			}
		} else {
			printReport(w, rep)
		}
	}
	return err
}

func reattachCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("reattach", stderr)
	var req control.ReattachRequest
	fs.StringVar(&req.QMP, "qmp", "", "the VM's QMP socket (default: <run-dir>/instances/UUID.qmp)")
	fs.StringVar(&req.DeviceID, "device-id", "", "the vGPU's QEMU device id (default vgpu0)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	id, err := parseUUIDCmd(fs, args)
	if err != nil {
		return err
	}
	if id == "" {
		return errors.New("usage: reattach UUID [-qmp PATH] [-device-id ID] [-json]")
	}
	rep, err := c.Reattach(ctx, id, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(w, rep)
	}
	fmt.Fprintf(w, "reattached %s at slot %#x (old device removed: %v) in %s; guest programs told of the loss: %d",
		rep.Instance, rep.Slot, rep.Unplugged, ms(rep.Took), rep.Programs)
	if rep.AgentErr != "" {
		fmt.Fprintf(w, " (guest agent: %s)", rep.AgentErr)
	}
	fmt.Fprintln(w)
	return nil
}

// parseUUIDCmd parses the flags of a command on one instance, whose UUID
// may stand before or after them; it returns "" when there is none.
func parseUUIDCmd(fs *flag.FlagSet, args []string) (string, error) {
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if id == "" && fs.NArg() == 1 {
		return fs.Arg(0), nil
	}
	if fs.NArg() > 0 {
		return "", usagef("%s: unexpected argument %q (vgpuctl %s -h shows its usage)", fs.Name(), fs.Arg(0), fs.Name())
	}
	return id, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func printReport(w io.Writer, r *migrate.Report) {
	switch {
	case r.RolledBack:
		fmt.Fprintf(w, "migration of %s FAILED in phase %q; rolled back: the VM runs on the source with its vGPU\n", r.Instance, r.Phase)
	case r.Phase != "":
		fmt.Fprintf(w, "migration of %s: OUTCOME UNKNOWN in phase %q: the destination was told to run the VM and did not confirm;\n"+
			"  the source VM stays paused. Check the destination (vgpuctl list, its QEMU's query-status) before quitting or resuming the source.\n", r.Instance, r.Phase)
		return
	default:
		fmt.Fprintf(w, "migrated %s: %s -> %s\n", r.Instance, r.From, r.To)
	}
	for _, rd := range r.Rounds {
		kind := "pre-copy"
		if rd.Final {
			kind = "final"
		}
		fmt.Fprintf(w, "  round %d (%s): %d bytes sent, %d buffer bytes in %d buffers, %d programs, %s (applied in %s)\n",
			rd.Number, kind, rd.StreamBytes, rd.BufferBytes, rd.Buffers, rd.Programs, ms(rd.Took), ms(rd.Applied))
	}
	if r.RolledBack {
		return
	}
	fmt.Fprintf(w, "  GPU stun %s = quiesce %s + max(final round %s, unplug %s) + QEMU %s + plug %s + guest resume %s\n",
		ms(r.Stun), ms(r.Quiesce), ms(r.Final), ms(r.Unplug), ms(r.QEMU), ms(r.Plug), ms(r.Resume))
	if r.MovedByManager {
		fmt.Fprintf(w, "  QEMU: moved by libvirt (virsh migrate) in %s, its downtime is libvirt's to report; %d bytes of device state; total %s\n",
			ms(r.QEMU), r.StreamBytes, ms(r.Total))
		return
	}
	fmt.Fprintf(w, "  QEMU: downtime %s, total %s; %d bytes of device state; total %s\n",
		ms(r.QEMUDowntime), ms(r.QEMUTotal), r.StreamBytes, ms(r.Total))
}

// help prints the usage, or the lines of it about one command.
func help(w io.Writer, args []string) error {
	if len(args) == 0 {
		_, err := fmt.Fprint(w, usage)
		return err
	}
	lines := helpLines(args[0])
	if len(lines) == 0 {
		return usagef("help: no command %q (vgpuctl help lists them)", args[0])
	}
	_, err := fmt.Fprintln(w, strings.Join(lines, "\n"))
	return err
}
