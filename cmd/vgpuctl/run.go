package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/vgpud/vgpud/internal/cliargs"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

const usage = `usage: vgpuctl [-socket PATH] COMMAND [ARGS]

commands:
  devices [-json]               physical devices and their load
  profiles [-json]              vGPU types
  list [-json]                  instances (names, labels) with their counters;
                                an instance's name stands for its UUID in every command
  show UUID                     one instance (JSON)
  create -profile P [-name NAME] [-label K=V]... [-uuid U] [-device N] [-reuse-domain D | -no-reuse]
         [-workload W | -like UUID] [-hosts SOCK,SOCK...]
                                with no -device, the placement policy picks the device
                                (-workload/-like say what the instance will run; -hosts
                                places across several vgpud daemons: docs/placement.md)
  create -incoming -uuid U -profile P
                                an instance that awaits the migration of U (vfio-user:
                                the destination QEMU attaches to it first; docs/migration.md)
  destroy UUID
  vm -instance UUID[,UUID...] [-kernel K -initrd I -disk D [-snapshot] -append A -mem MiB -cpus N]
     [-qemu BIN] [-vmm-root DIR -vmm-run SCRIPT] [-print]
                                start a QEMU VM with the instances attached: an instance
                                of vgpud -transport mpqemu by x-pci-proxy-dev on the host's
                                QEMU (7.2), one of -transport vfio-user by vfio-user-pci on
                                QEMU 11.1 run from the VMM root (make vmm-root; -qemu names
                                another QEMU >= 10.1), guest RAM a sealed shared memfd;
                                prints the QEMU command line, then the console
  top [-n N] [-interval D]      live view of devices and instances (q or ctrl-c quits)
  stats [-json]                 scheduler and instance counters
  policy DEVICE [NAME]          show or set a device's scheduling policy
                                (best-effort, equal-share, fixed-share, timeslice)
  set-share UUID N              an instance's weight under fixed-share
  reuse [-json]                 result-reuse domains and counters
  reuse set UUID DOMAIN|private|off
  reuse budget DOMAIN BYTES|unpin
  set-profile UUID PROFILE      move an instance (VM attached) to another vGPU type;
                                a share or limit set before is kept
  limits UUID [-kernel-timeout D] [-slice D] [-build-timeout D] [-program-bytes N]
                                an instance's time budgets and program quota
                                (a worker whose turn or build overruns is ended)
  realloc UUID [-device N] [-profile P] [-deadline D] [-json]
                                move the instance (VM running) to another device or
                                vGPU type; guest programs that registered for
                                reconfiguration checkpoint first and resume after
                                (docs/overcommit.md)
  realloc UUID -to HOST:PORT -uri QEMU-URI
                                the same to another host: a live migration
  resources UUID [-json]        what the guest's programs declared, what the instance
                                holds, its overcommit policy and any downgrade proposal
  overcommit UUID [none|block|migrate|suspend|profile [-timeout D]]
  overcommit -profile P [none|block|migrate|suspend [-timeout D]]
                                what an allocation the device cannot hold does
                                (with no policy: the current one)
  proposals [-window D] [-json] instances whose peak stayed below a smaller profile
  migrate UUID -to HOST:PORT -uri QEMU-URI [-qmp PATH] [-device-id ID] [-rounds N] [-no-precopy] [-quiesce-first] [-json]
                                move the instance and its running VM to the vgpud
                                listening at HOST:PORT, whose QEMU waits with
                                -incoming QEMU-URI (docs/migration.md)
  migrate UUID -to HOST:PORT -libvirt DOMAIN -libvirt-to URI [-uri MIGRATE-URI] [-dest-run-dir DIR]
                                the same for a libvirt domain on vfio-user: libvirt
                                moves the VM (virsh migrate --live --suspend); the
                                destination's instance awaits it (create -incoming)
  reattach UUID [-qmp PATH] [-device-id ID] [-json]
                                give the instance's running VM its vGPU back after
                                vgpud restarted: re-plug it over QMP; the guest's
                                programs are told its state was lost (docs/operating.md)
  attach -libvirt DOMAIN UUID [-json]
                                give libvirt domain DOMAIN the instance's vGPU (a shut-off
                                domain is started) and name it in the domain's metadata,
                                so that vgpud -libvirt plugs it from then on (docs/operating.md)
  attach -xen DOMID -pci BB:DD.F UUID [-vcpus N] [-ram BYTES]
                                serve the instance's vGPU to running Xen HVM domain DOMID
                                as an ioreq server at PCI slot BB:DD.F (docs/xen.md)
  upgrade [-binary PATH] [-json]
                                upgrade vgpud in place: start the new binary and
                                hand it every socket, connection and worker; the
                                guests see a pause, not an error (docs/upgrade.md)
  place [-policy P] [-dataset FILE] [-json]
                                show or set how new instances are placed (fewest,
                                round-robin, interference) and load a co-run dataset
                                the interference model learns from (docs/placement.md)
  place -explain -profile P [-workload W | -like UUID] [-hosts SOCK,SOCK...] [-json]
                                the predicted added interference (or other score) of
                                every device, and the one an instance would go to
  define -name NAME -profile P [-uuid U] [-device N] [-label K=V]... [-create] [-json]
                                a persistent definition (/etc/vgpud/instances.d/NAME.json):
                                vgpud creates the instance at every start when missing
                                (-create: now too)
  undefine NAME                 remove a definition (its instance stays until destroyed)
  definitions [-json]           the persistent definitions
  events [-follow] [-since SEQ] vgpud's recent events as JSON lines: instances created,
                                destroyed, attached, changed, lost; workers; migrations;
                                upgrades (in memory, the last 4096; docs/operating.md)
  version [-client] [-json]     vgpuctl's build and vgpud's (version, VCS revision, Go)
  help [COMMAND]                this text (or COMMAND's lines of it)

COMMAND -h prints a command's flags. Exit status: 0 done, 1 failed,
2 a command line vgpuctl cannot run.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vgpuctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // -h: the usage, once, on stdout; an error: one line and a hint
	fs.Usage = func() {}
	defSock := os.Getenv("VGPUD_SOCKET")
	if defSock == "" {
		defSock = defaultSocket
	}
	sock := fs.String("socket", defSock, "vgpud control socket ($VGPUD_SOCKET)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return usagef("%v (vgpuctl help lists the commands and flags)", err)
	}
	if fs.NArg() == 0 {
		return usagef("no command (vgpuctl help lists them)")
	}
	c := control.NewClient(*sock)
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "help" {
		return help(stdout, rest)
	}
	if len(helpLines(cmd)) == 0 {
		return usagef("unknown command %q (vgpuctl help lists the commands)", cmd)
	}
	if cliargs.WantsHelp(rest) {
		// The command's lines of the usage and its flags, on stdout:
		// a command with flags parses just -h and prints them.
		if flagless[cmd] {
			printCmdUsage(stdout, cmd, flag.NewFlagSet(cmd, flag.ContinueOnError))
			return nil
		}
		if cmd == "vm" {
			help(stdout, []string{cmd})
		}
		err := dispatch(ctx, c, cmd, []string{"-h"}, stdout, helpWriter{stdout})
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	err := dispatch(ctx, c, cmd, rest, stdout, stderr)
	if isFlagError(err) {
		return usagef("%s: %v (vgpuctl %s -h shows its flags)", cmd, err, cmd)
	}
	return explain(err, *sock)
}

// defaultSocket is where vgpud serves its control API unless told
// otherwise (vgpud -run-dir).
const defaultSocket = "/run/vgpud/control.sock"

// flagless are the commands with no flags.
var flagless = map[string]bool{"show": true, "destroy": true, "policy": true, "set-share": true, "set-profile": true, "undefine": true}

// explain adds to err what an operator does about it: a control socket
// that is not there or refuses means no vgpud serves it.
func explain(err error, sock string) error {
	var errno syscall.Errno
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, control.ErrUnreachable):
		// Only a failed connection means vgpud is not there: a missing
		// kernel for vgpuctl vm is an ENOENT too.
		return err
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		errors.As(err, &errno)
		return &noDaemonError{sock: sock, why: errno.Error(), err: err,
			hint: "start vgpud (systemctl start vgpud), or point vgpuctl at its socket with -socket PATH or $VGPUD_SOCKET"}
	case errors.Is(err, syscall.EACCES):
		errors.As(err, &errno)
		return &noDaemonError{sock: sock, why: errno.Error(), err: err,
			hint: "the control socket is root's and its group's (vgpud's socket_group; the vgpud group with the Debian package): join that group (adduser USER vgpud, then log in again) or run vgpuctl as root"}
	}
	return err
}

// noDaemonError: vgpuctl could not reach vgpud's control socket.
type noDaemonError struct {
	sock, why, hint string
	err             error
}

func (e *noDaemonError) Error() string {
	return fmt.Sprintf("cannot reach vgpud at %s (%s): %s", e.sock, e.why, e.hint)
}
func (e *noDaemonError) Unwrap() error { return e.err }

// dispatch runs command cmd with its arguments.
func dispatch(ctx context.Context, c *control.Client, cmd string, rest []string, stdout, stderr io.Writer) error {
	switch cmd {
	case "devices":
		return devices(ctx, c, rest, stdout, stderr)
	case "profiles":
		return profiles(ctx, c, rest, stdout, stderr)
	case "list":
		return list(ctx, c, rest, stdout, stderr)
	case "show":
		if len(rest) != 1 {
			return usagef("usage: show UUID")
		}
		info, err := c.Instance(ctx, rest[0])
		if err != nil {
			return err
		}
		return printJSON(stdout, info)
	case "create":
		return create(ctx, c, rest, stdout, stderr)
	case "destroy":
		if len(rest) != 1 {
			return usagef("usage: destroy UUID")
		}
		return c.Destroy(ctx, rest[0])
	case "vm":
		return vm(ctx, c, rest, stdout, stderr)
	case "top":
		return top(ctx, c, rest, stdout, stderr)
	case "stats":
		return stats(ctx, c, rest, stdout, stderr)
	case "policy":
		return policy(ctx, c, rest, stdout)
	case "set-share":
		return setShare(ctx, c, rest, stdout)
	case "reuse":
		return reuseCmd(ctx, c, rest, stdout, stderr)
	case "set-profile":
		return setProfile(ctx, c, rest, stdout)
	case "limits":
		return setLimits(ctx, c, rest, stdout, stderr)
	case "migrate":
		return migrateCmd(ctx, c, rest, stdout, stderr)
	case "realloc":
		return reallocCmd(ctx, c, rest, stdout, stderr)
	case "resources":
		return resourcesCmd(ctx, c, rest, stdout, stderr)
	case "overcommit":
		return overcommitCmd(ctx, c, rest, stdout, stderr)
	case "proposals":
		return proposalsCmd(ctx, c, rest, stdout, stderr)
	case "reattach":
		return reattachCmd(ctx, c, rest, stdout, stderr)
	case "attach":
		return attachCmd(ctx, c, rest, stdout, stderr)
	case "upgrade":
		return upgradeCmd(ctx, c, rest, stdout, stderr)
	case "place":
		return placeCmd(ctx, c, rest, stdout, stderr)
	case "version":
		return versionCmd(ctx, c, rest, stdout, stderr)
	case "events":
		return eventsCmd(ctx, c, rest, stdout, stderr)
	case "define":
		return defineCmd(ctx, c, rest, stdout, stderr)
	case "undefine":
		return undefineCmd(ctx, c, rest, stdout)
	case "definitions":
		return definitionsCmd(ctx, c, rest, stdout, stderr)
	}
	return usagef("unknown command %q (vgpuctl help lists the commands)", cmd)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func mib(n uint64) string { return fmt.Sprintf("%d MiB", n>>20) }

// listFlags parses a listing's arguments: -json and nothing else.
func listFlags(name string, args []string, stderr io.Writer) (asJSON bool, err error) {
	fs := newFlags(name, stderr)
	j := fs.Bool("json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if fs.NArg() != 0 {
		return false, usagef("%s: unexpected argument %q (usage: %s [-json])", name, fs.Arg(0), name)
	}
	return *j, nil
}

func devices(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	asJSON, err := listFlags("devices", args, stderr)
	if err != nil {
		return err
	}
	devs, err := c.Devices(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, devs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tPLATFORM\tCU\tMEMORY\tINSTANCES")
	for _, d := range devs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\n", d.Index, d.Name, d.Platform, d.ComputeUnits, mib(d.GlobalMemBytes), d.Instances)
	}
	return tw.Flush()
}

func profiles(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	asJSON, err := listFlags("profiles", args, stderr)
	if err != nil {
		return err
	}
	ps, err := c.Profiles(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, ps)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMEMORY\tSHARE\tMAX/DEVICE")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", p.Name, mib(p.MemBytes), p.Share, p.MaxPerDevice)
	}
	return tw.Flush()
}

func list(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	asJSON, err := listFlags("list", args, stderr)
	if err != nil {
		return err
	}
	insts, err := c.Instances(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, insts)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UUID\tNAME\tPROFILE\tDEV\tVM\tMEM USED\tCOMMANDS\tERRORS\tLAUNCHES\tKERNEL TIME\tERROR")
	for _, in := range insts {
		vm := "-"
		if in.Attached {
			vm = "attached"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%.3fs\t%s\n", in.UUID, orDash(in.Name), in.Profile.Name, in.Device, vm,
			mib(in.MemUsed), in.Stats.Commands, in.Stats.Errors, in.Stats.Launches, float64(in.Stats.KernelNanos)/1e9, in.Error)
	}
	return tw.Flush()
}

func create(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("create", stderr)
	profile := fs.String("profile", "", "vGPU type (see vgpuctl profiles)")
	id := fs.String("uuid", "", "instance UUID (default: random)")
	dev := fs.Int("device", -1, "physical device index (default: placed by vgpud)")
	reuseDom := fs.String("reuse-domain", "", "result-reuse domain shared with other instances (default: private)")
	noReuse := fs.Bool("no-reuse", false, "turn result reuse off for the instance")
	hosts := fs.String("hosts", "", "control sockets of several vgpud daemons, comma separated: create on the host and device placement picks")
	name := fs.String("name", "", "a unique name for the instance, usable wherever its UUID is")
	incoming := fs.Bool("incoming", false, "make the instance await an incoming migration of -uuid (vfio-user: create it, start the destination QEMU attached to it with -incoming, then vgpuctl migrate on the source; docs/migration.md)")
	labels := labelFlags{}
	fs.Var(labels, "label", "a KEY=VALUE label; repeatable")
	var hint hintFlags
	hint.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profile == "" {
		return usagef("create: -profile is required (vgpuctl profiles lists them)")
	}
	if fs.NArg() != 0 {
		return usagef("create: unexpected argument %q", fs.Arg(0))
	}
	devSet := false
	fs.Visit(func(f *flag.Flag) { devSet = devSet || f.Name == "device" })
	if devSet && *dev < 0 {
		return usagef("create: -device %d refused: a device index is 0 or more (vgpuctl devices lists them; leave -device out to let vgpud place the instance)", *dev)
	}
	if *incoming && *id == "" {
		return usagef("create: -incoming needs -uuid, the UUID of the instance the migration brings")
	}
	req := mdev.CreateRequest{Profile: *profile, UUID: *id, ReuseDomain: *reuseDom, NoReuse: *noReuse, Name: *name, Incoming: *incoming}
	if len(labels) > 0 {
		req.Labels = labels
	}
	if *dev >= 0 {
		if *hosts != "" || hint.set() {
			return errors.New("create: -device picks the device; -hosts, -workload and -like are for placement")
		}
		req.Device = dev
	}
	cs := hostClients(c, *hosts)
	var err error
	if req.Hint, err = hint.resolve(ctx, cs); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if *hosts != "" {
		best, exps, err := placeAcross(ctx, cs, *profile, req.Hint, stderr)
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if best < 0 {
			return fmt.Errorf("create: %w on any host", mdev.ErrNoCapacity)
		}
		// The device is fixed: between the explanation and the create
		// another placement may have taken the room; the create then
		// fails rather than landing somewhere unexplained.
		c, req.Device = cs[best], &exps[best].Chosen
		fmt.Fprintf(stderr, "vgpuctl: placed on %s device %d (score %.4f)\n", c.SocketPath(), exps[best].Chosen, exps[best].Score)
	}
	info, err := c.Create(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, info.UUID)
	return nil
}

// guestDir is where make puts the guest kernel and initramfs.
func guestDir() string {
	if d := os.Getenv("VGPUD_GUEST_DIR"); d != "" {
		return d
	}
	return filepath.Join("build", "guest")
}

func vm(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := flag.NewFlagSet("vm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		ids     = fs.String("instance", "", "instance UUIDs to attach, comma separated")
		kernel  = fs.String("kernel", filepath.Join(guestDir(), "vmlinuz"), "guest kernel")
		initrd  = fs.String("initrd", filepath.Join(guestDir(), "initramfs.cpio"), "guest initramfs")
		disk    = fs.String("disk", "", "a raw disk image attached read-only (the userland disk of make guest-apps: build/guest/apps/rootfs.ext4)")
		snap    = fs.Bool("snapshot", false, "attach -disk writable through a snapshot (QEMU's snapshot=on: the guest's writes are discarded when QEMU exits), for a disk that is the guest's root file system")
		app     = fs.String("append", "", "extra kernel command line, e.g. vgpu.run=vgpu-suite")
		mem     = fs.Int("mem", qemuvm.DefaultMemMiB, "guest RAM in MiB")
		cpus    = fs.Int("cpus", qemuvm.DefaultCPUs, "vCPUs")
		qemu    = fs.String("qemu", qemuvm.DefaultQEMU, "QEMU binary (default for a vfio-user instance: QEMU 11.1 from the VMM root)")
		vmmRun  = fs.String("vmm-run", qemuvm.VMMRunScript, "for a vfio-user instance without -qemu: the script that runs QEMU from the VMM root")
		vmmRoot = fs.String("vmm-root", qemuvm.VMMRootDir, "for a vfio-user instance without -qemu: the VMM root (make vmm-root)")
		print   = fs.Bool("print", false, "print the QEMU command line and exit")
		prefix  = fs.String("prefix", "", "prefix for console lines")
		in      = fs.String("incoming", "", "start as the destination of a migration: QEMU listens at this URI (e.g. tcp:0:4444), paused; mpqemu: without the vGPU, which the destination vgpud plugs in; vfio-user: attached to the instance created with create -incoming (docs/migration.md)")
		runDir  = fs.String("run-dir", "", "with -incoming: the destination vgpud's run directory (default: the control socket's)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ids == "" {
		return errors.New("vm: -instance is required")
	}
	if *snap && *disk == "" {
		return errors.New("vm: -snapshot needs -disk")
	}
	q := vmQEMU{binary: *qemu, vmmRun: *vmmRun, vmmRoot: *vmmRoot, printOnly: *print}
	fs.Visit(func(f *flag.Flag) { q.binarySet = q.binarySet || f.Name == "qemu" })
	cfg := qemuvm.Config{QEMU: *qemu, Kernel: *kernel, Initrd: *initrd, Disk: *disk, DiskSnapshot: *snap, Append: *app, MemMiB: *mem, CPUs: *cpus,
		SerialLog: &prefixWriter{w: w, prefix: *prefix}, Stderr: stderr, Incoming: *in}
	if *in != "" {
		// The instance does not exist here yet: the migration creates it.
		// QEMU's monitor and agent channel go where that instance's will be.
		id := *ids
		if strings.Contains(id, ",") {
			return errors.New("vm -incoming: one instance")
		}
		dir := *runDir
		if dir == "" {
			dir = filepath.Dir(c.SocketPath())
		}
		base := filepath.Join(dir, "instances", id)
		cfg.QMPSocket, cfg.AgentSocket = base+".qmp", base+".agent.sock"
		// On vfio-user the instance exists already (vgpuctl create
		// -incoming) and QEMU's vfio-user-pci connects to it at start:
		// the vGPU stays attached through the migration
		// (docs/migration.md).
		if info, err := c.Instance(ctx, id); err == nil && strings.HasSuffix(info.Socket, vfioUserSuffix) {
			if err := q.addDevice(&cfg, 0, id, info.Socket); err != nil {
				return err
			}
			base = instanceBase(info.Socket)
			cfg.QMPSocket, cfg.AgentSocket = base+".qmp", base+".agent.sock"
		}
	}
	defer func() {
		if !*print {
			for _, d := range cfg.Devices {
				d.FD.Close() // an os.File closes once: a second Close does nothing
			}
		}
	}()
	for i, id := range strings.Split(*ids, ",") {
		if *in != "" {
			break
		}
		info, err := c.Instance(ctx, id)
		if err != nil {
			return err
		}
		if info.Socket == "" {
			return fmt.Errorf("instance %s has no socket", id)
		}
		if !strings.HasSuffix(info.Socket, ".sock") {
			return fmt.Errorf("instance %s: socket %s is neither mpqemu's nor vfio-user's", id, info.Socket)
		}
		if err := q.addDevice(&cfg, i, id, info.Socket); err != nil {
			return err
		}
		// The first instance's guest agent channel, when vgpud serves one
		// (<uuid>.agent.sock next to the QEMU socket; docs/agent-channel.md).
		if agentSock := instanceBase(info.Socket) + ".agent.sock"; i == 0 {
			if _, err := os.Stat(agentSock); err == nil {
				cfg.AgentSocket = agentSock
			}
			// QEMU's monitor where migration looks for it
			// (mdev.Instance.QMPSocket).
			cfg.QMPSocket = instanceBase(info.Socket) + ".qmp"
		}
	}
	if err := q.finish(&cfg); err != nil {
		return err
	}
	fmt.Fprintln(w, "+", cfg.CommandLine())
	if *print {
		return cfg.Validate()
	}
	m, err := qemuvm.Start(ctx, cfg)
	if err != nil {
		return err
	}
	for _, d := range cfg.Devices {
		d.FD.Close() // QEMU holds its own copy now
	}
	if err := m.Wait(); err != nil {
		return err
	}
	return guestStatus(*app, m.Lines())
}

// guestStatus is vgpuctl vm's verdict on a guest that powered off: nil
// unless the kernel command line ran a program (vgpu.run=) that reported
// a non-zero exit ("VGPU-INIT exit=N", guestagent/cmd/vgpu-init) or none.
func guestStatus(app string, lines []string) error {
	if !strings.Contains(app, "vgpu.run=") {
		return nil
	}
	for i := len(lines) - 1; i >= 0; i-- {
		rest, ok := strings.CutPrefix(lines[i], "VGPU-INIT exit=")
		if !ok {
			continue
		}
		code, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil {
			return fmt.Errorf("guest: bad exit line %q", lines[i])
		}
		if code != 0 {
			return guestExit{code: code}
		}
		return nil
	}
	return errors.New("the guest powered off without its program's exit status (no VGPU-INIT exit= line)")
}

// prefixWriter writes each line with a prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if p.prefix == "" {
		return p.w.Write(b)
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(p.w, p.prefix+line); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
