package qemuvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// Defaults applied by Config.Args.
const (
	DefaultQEMU   = "qemu-system-x86_64"
	DefaultMemMiB = 256
	DefaultCPUs   = 1
	// DefaultAgentPort is the virtio-serial port name the guest agent
	// opens (guestagent/agent.PortName).
	DefaultAgentPort = "org.vgpud.agent.0"
	// BaseAppend starts every kernel command line: the console on the
	// first serial port (captured by Start) and a reboot on panic, which
	// -no-reboot turns into QEMU exiting.
	BaseAppend = "console=ttyS0 panic=-1"
)

// PCI slots on bus 0: the vGPUs from ProxySlot on (the ProxyDevices,
// then the VFIOUserDevices), the agent channel's
// virtio-serial controller at AgentSlot, the userland disk at DiskSlot.
const (
	ProxySlot = 0x10
	AgentSlot = 0x08
	DiskSlot  = 0x09
)

// firstProxyFD is the descriptor number the first proxy device's socket
// gets in QEMU: exec.Cmd.ExtraFiles start after stdin, stdout, stderr.
const firstProxyFD = 3

// ProxyDevice is a vGPU instance attached with QEMU's multi-process
// protocol: FD is QEMU's end of a connected AF_UNIX stream socket whose
// other end the mdev transport serves.
type ProxyDevice struct {
	// ID names the device in QEMU (device_del, QMP); letters, digits,
	// '-', '_' and '.', starting with a letter.
	ID string
	FD *os.File
}

// VFIOUserDevice is a vGPU instance attached with QEMU >= 10.1's
// vfio-user-pci (docs/vfio-user.md): QEMU connects to Socket, the
// instance's <uuid>.vfio-user.sock of a vgpud run with -transport
// vfio-user, itself.
type VFIOUserDevice struct {
	// ID names the device in QEMU, with ProxyDevice.ID's syntax.
	ID string
	// Socket is the path of the instance's vfio-user socket, at most
	// maxSocketPath bytes (a sockaddr_un's sun_path).
	Socket string
}

// Share is a host directory the guest sees over 9p under a mount tag.
type Share struct {
	Tag, Dir string
}

// maxSocketPath is the longest path a Unix socket address holds.
const maxSocketPath = 107

// Config describes a VM. Zero fields take the Default* values.
type Config struct {
	// QEMU is the emulator binary.
	QEMU string
	// Prefix, if set, is a command QEMU runs under: the process started
	// is Prefix[0] with Prefix[1:], then QEMU and its arguments, e.g. the
	// VMM root's "scripts/vmm-run.sh build/vmm-root --" (VMMRoot.Apply).
	// The process's pid, signals and exit status must be QEMU's.
	Prefix []string
	// Env is added to the process's environment (vmm-run.sh's
	// VMM_RUN_BINDS, say).
	Env []string
	// Modern selects the spelling of QEMU >= 9.2 for options QEMU 11
	// removed the old spelling of (the agent chardev's reconnect-ms).
	// Attaching a VFIOUserDevice implies it.
	Modern bool
	// Kernel and Initrd are the guest's kernel image and initramfs.
	Kernel, Initrd string
	// Disk, if set, is a raw disk image attached read-only as a virtio
	// block device at DiskSlot (/dev/vda in the guest): the Debian
	// userland of scripts/fetch-userland.sh (docs/guest-image.md). QEMU
	// never writes it, so VMs can share one image.
	Disk string
	// DiskSnapshot attaches Disk writable, with QEMU's snapshot=on: the
	// guest's writes go to a temporary file QEMU deletes when it exits,
	// so the image is still never written. For a guest whose root file
	// system is Disk (an ordinary Debian VM with systemd as init,
	// scripts/guest-os.sh).
	DiskSnapshot bool
	// Shares are host directories the guest mounts read-only over 9p
	// (virtio-9p, -virtfs): mount -t 9p -o trans=virtio TAG DIR.
	Shares []Share
	// Append is added to BaseAppend on the kernel command line, e.g.
	// "vgpu.run=vgpu-mmiobench vgpu.args=-dev,7667:0001".
	Append string
	// MemMiB is the guest RAM size.
	MemMiB int
	// CPUs is the number of vCPUs.
	CPUs int
	// Devices are the vGPU instances attached by x-pci-proxy-dev (QEMU
	// 7.2's multi-process protocol), in PCI slot order.
	Devices []ProxyDevice
	// VFIOUser are the vGPU instances attached by vfio-user-pci (QEMU >=
	// 10.1), in PCI slot order after Devices. With any, guest RAM is
	// sealed (seal=on), which vgpud requires of a vfio-user client's RAM.
	VFIOUser []VFIOUserDevice
	// ExtraDevices are further -device values, verbatim (e.g. "edu",
	// "virtio-serial-pci").
	ExtraDevices []string
	// ExtraArgs are appended verbatim after everything else (e.g. a
	// -chardev for a virtio-serial port).
	ExtraArgs []string
	// AgentSocket, if set, attaches the guest agent channel: a
	// virtio-serial port named AgentPort whose chardev connects to this
	// Unix socket (vgpud's <uuid>.agent.sock) and reconnects every second
	// if vgpud restarts (docs/agent-channel.md).
	AgentSocket string
	// AgentPort is the port's name in the guest; "" means DefaultAgentPort.
	AgentPort string
	// QMPSocket, if set, is the path of a QMP server socket QEMU listens
	// on (without waiting for a client).
	QMPSocket string
	// Incoming, if set, starts QEMU as a migration destination listening
	// at this URI (-incoming), paused until told to continue (-S), so
	// that the VM runs only once vgpud has plugged its vGPU
	// (docs/migration.md).
	Incoming string
	// SerialLog, if set, receives every console line (with "\n").
	SerialLog io.Writer
	// Stderr, if set, receives QEMU's own diagnostics; the last few KiB
	// are kept for error messages either way.
	Stderr io.Writer
}

func (c Config) withDefaults() Config {
	if c.QEMU == "" {
		c.QEMU = DefaultQEMU
	}
	if c.MemMiB == 0 {
		c.MemMiB = DefaultMemMiB
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	return c
}

// Validate reports what makes c unusable, wrapping ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Kernel == "" {
		errs = append(errs, errors.New("no kernel"))
	}
	if c.Initrd == "" {
		errs = append(errs, errors.New("no initrd"))
	}
	if c.MemMiB < 16 || c.MemMiB > 1<<20 {
		errs = append(errs, fmt.Errorf("memory %d MiB: want 16..1048576", c.MemMiB))
	}
	if c.CPUs < 1 || c.CPUs > 64 {
		errs = append(errs, fmt.Errorf("%d cpus: want 1..64", c.CPUs))
	}
	if strings.ContainsAny(c.Append, "\"\n") {
		errs = append(errs, fmt.Errorf("kernel command line %q: no quotes or newlines", c.Append))
	}
	if strings.Contains(c.AgentSocket, ",") || strings.Contains(c.AgentPort, ",") {
		errs = append(errs, fmt.Errorf("agent socket %q or port %q contains a comma", c.AgentSocket, c.AgentPort))
	}
	if strings.ContainsAny(c.Incoming, ", ") {
		errs = append(errs, fmt.Errorf("incoming URI %q contains a comma or space", c.Incoming))
	}
	if strings.Contains(c.Disk, ",") {
		errs = append(errs, fmt.Errorf("disk image path %q contains a comma", c.Disk))
	}
	for i, sh := range c.Shares {
		if !validID(sh.Tag) || strings.Contains(sh.Dir, ",") || sh.Dir == "" {
			errs = append(errs, fmt.Errorf("share %d: bad tag %q or directory %q (no commas)", i, sh.Tag, sh.Dir))
		}
	}
	if strings.Contains(c.QMPSocket, ",") {
		errs = append(errs, fmt.Errorf("qmp socket path %q contains a comma", c.QMPSocket))
	}
	seen := make(map[string]bool)
	for i, d := range c.Devices {
		if !validID(d.ID) {
			errs = append(errs, fmt.Errorf("device %d: bad id %q", i, d.ID))
		}
		if seen[d.ID] {
			errs = append(errs, fmt.Errorf("device %d: id %q used twice", i, d.ID))
		}
		seen[d.ID] = true
		if d.FD == nil {
			errs = append(errs, fmt.Errorf("device %q: no socket fd", d.ID))
		}
	}
	for i, d := range c.VFIOUser {
		if !validID(d.ID) {
			errs = append(errs, fmt.Errorf("vfio-user device %d: bad id %q", i, d.ID))
		}
		if seen[d.ID] {
			errs = append(errs, fmt.Errorf("vfio-user device %d: id %q used twice", i, d.ID))
		}
		seen[d.ID] = true
		if d.Socket == "" || len(d.Socket) > maxSocketPath {
			errs = append(errs, fmt.Errorf("vfio-user device %q: socket path %q: want 1..%d bytes", d.ID, d.Socket, maxSocketPath))
		}
	}
	if len(c.Devices)+len(c.VFIOUser) > 0x20-ProxySlot {
		errs = append(errs, fmt.Errorf("%d vGPUs: at most %d fit from slot %#x", len(c.Devices)+len(c.VFIOUser), 0x20-ProxySlot, ProxySlot))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// validID accepts QEMU's id syntax: a letter, then letters, digits, '-',
// '_' and '.'.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i, r := range id {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')) {
			return false
		}
	}
	return true
}

// Args returns QEMU's arguments (without the binary). Device i's socket is
// descriptor 3+i, as Start passes them.
func (c Config) Args() []string {
	c = c.withDefaults()
	mem := strconv.Itoa(c.MemMiB) + "M"
	backend := "memory-backend-memfd,id=mem,size=" + mem + ",share=on"
	if len(c.VFIOUser) > 0 {
		// vgpud maps a vfio-user client's RAM only if it cannot shrink
		// (docs/vfio-user.md); seal=on is the backend's default, spelled
		// out.
		backend += ",seal=on"
	}
	args := []string{
		"-accel", "tcg",
		"-machine", "pc,memory-backend=mem",
		"-object", backend,
		"-m", mem,
		"-smp", strconv.Itoa(c.CPUs),
		"-nodefaults", "-no-user-config",
		"-display", "none",
		"-serial", "stdio",
		"-kernel", c.Kernel,
		"-initrd", c.Initrd,
		"-append", strings.TrimSpace(BaseAppend + " " + c.Append),
	}
	// Fixed PCI slots: a migration destination started without the vGPU
	// (it is plugged after QEMU's migration) must lay out every other
	// device exactly as the source did.
	for i, d := range c.Devices {
		args = append(args, "-device", fmt.Sprintf("x-pci-proxy-dev,id=%s,fd=%d,addr=%#x", d.ID, firstProxyFD+i, ProxySlot+i))
	}
	for i, d := range c.VFIOUser {
		args = append(args, "-device", vfioUserJSON(d, ProxySlot+len(c.Devices)+i))
	}
	if c.AgentSocket != "" {
		port := c.AgentPort
		if port == "" {
			port = DefaultAgentPort
		}
		args = append(args,
			// Thread names ("CPU n/TCG") let vgpud find the vCPU threads
			// for its scheduling hints.
			"-name", "vgpu-guest,debug-threads=on",
			"-device", fmt.Sprintf("virtio-serial-pci,id=agentser,addr=%#x", AgentSlot),
			"-chardev", "socket,id=agentch,path="+c.AgentSocket+c.reconnect(),
			"-device", "virtserialport,bus=agentser.0,chardev=agentch,name="+port)
	}
	if c.Disk != "" {
		mode := "readonly=on"
		if c.DiskSnapshot {
			mode = "snapshot=on"
		}
		args = append(args,
			"-drive", "file="+c.Disk+",format=raw,if=none,id=disk0,"+mode,
			"-device", fmt.Sprintf("virtio-blk-pci,drive=disk0,addr=%#x", DiskSlot))
	}
	for i, sh := range c.Shares {
		args = append(args,
			"-fsdev", fmt.Sprintf("local,id=share%d,path=%s,security_model=none,readonly=on", i, sh.Dir),
			"-device", fmt.Sprintf("virtio-9p-pci,fsdev=share%d,mount_tag=%s", i, sh.Tag))
	}
	for _, d := range c.ExtraDevices {
		args = append(args, "-device", d)
	}
	args = append(args, "-no-reboot")
	if c.QMPSocket != "" {
		args = append(args, "-qmp", "unix:"+c.QMPSocket+",server=on,wait=off")
	}
	if c.Incoming != "" {
		args = append(args, "-S", "-incoming", c.Incoming)
	}
	return append(args, c.ExtraArgs...)
}

// vfioUserJSON is vfio-user-pci's -device value for d at slot.
func vfioUserJSON(d VFIOUserDevice, slot int) string { return VFIOUserArg(d.ID, d.Socket, slot) }

// VFIOUserArg is QEMU's -device value for a vfio-user-pci device with QEMU
// id id at PCI slot slot of bus 0 that connects to the vfio-user socket at
// path as QEMU starts: JSON, because its socket property is a structure
// (a SocketAddress). libvirt domains carry the same (migrate/libvirt).
func VFIOUserArg(id, path string, slot int) string {
	type socket struct {
		Type string `json:"type"`
		Path string `json:"path"`
	}
	b, err := json.Marshal(struct {
		Driver string `json:"driver"`
		ID     string `json:"id"`
		Addr   string `json:"addr"`
		Socket socket `json:"socket"`
	}{"vfio-user-pci", id, fmt.Sprintf("%#x", slot), socket{"unix", path}})
	if err != nil {
		panic(fmt.Sprintf("qemuvm: marshal vfio-user-pci: %v", err)) // strings always marshal
	}
	return string(b)
}

// reconnect is the agent chardev's reconnect option: a second between
// tries. QEMU 9.2 deprecated reconnect= for reconnect-ms=, and QEMU 11
// refuses it; QEMU 7.2 knows only reconnect=.
func (c Config) reconnect() string {
	if c.Modern || len(c.VFIOUser) > 0 {
		return ",reconnect-ms=1000"
	}
	return ",reconnect=1"
}

// argv is the whole command: Prefix, the QEMU binary, its arguments.
func (c Config) argv() []string {
	c = c.withDefaults()
	return append(append(append([]string(nil), c.Prefix...), c.QEMU), c.Args()...)
}

// CommandLine is the command as a shell would take it (Env first, then
// Prefix and the QEMU binary). The proxy sockets are descriptors 3, 4,
// ... of the process.
func (c Config) CommandLine() string {
	words := append(append([]string(nil), c.Env...), c.argv()...)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// DialProxy connects to the Unix socket at path (an mdev instance's
// socket) and returns QEMU's end of the connection as a file for
// ProxyDevice.FD. Start passes a copy to QEMU, so the caller closes it
// once Start has returned.
func DialProxy(path string) (*os.File, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("proxy socket: %w", err)
	}
	defer c.Close()
	f, err := c.File()
	if err != nil {
		return nil, fmt.Errorf("proxy socket %s: %w", path, err)
	}
	return f, nil
}
