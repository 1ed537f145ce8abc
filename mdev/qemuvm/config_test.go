package qemuvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// placeholderFD is an open file for a ProxyDevice's FD, which these
// tests only pass around. It must be a file of its own: an os.File made
// around fd 0 closes fd 0 when it is collected, and two of them closed a
// file that another test had opened as fd 0 in between (TestBootEdu's
// initramfs read failed with EBADF in CI).
func placeholderFD(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestArgs(t *testing.T) {
	f := placeholderFD(t)
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{
			name: "defaults",
			cfg:  Config{Kernel: "/k/vmlinuz", Initrd: "/k/initrd.cpio"},
			want: append(argsHead("256M", 1, false, "/k/vmlinuz", "/k/initrd.cpio", "console=ttyS0 panic=-1"),
				"-no-reboot",
			),
		},
		{
			name: "everything",
			cfg: Config{
				Kernel: "k", Initrd: "i", Append: "vgpu.run=x vgpu.args=-n,5", MemMiB: 512, CPUs: 2,
				Devices:      []ProxyDevice{{ID: "vgpu0", FD: f}, {ID: "vgpu1", FD: f}},
				ExtraDevices: []string{"edu"},
				ExtraArgs:    []string{"-chardev", "socket,id=ch0,path=/tmp/s"},
				QMPSocket:    "/tmp/qmp.sock",
			},
			want: append(argsHead("512M", 2, false, "k", "i", "console=ttyS0 panic=-1 vgpu.run=x vgpu.args=-n,5"),
				"-device", "x-pci-proxy-dev,id=vgpu0,fd=3,addr=0x10",
				"-device", "x-pci-proxy-dev,id=vgpu1,fd=4,addr=0x11",
				"-device", "edu",
				"-no-reboot",
				"-qmp", "unix:/tmp/qmp.sock,server=on,wait=off",
				"-chardev", "socket,id=ch0,path=/tmp/s",
			),
		},
		{
			name: "vfio-user",
			cfg: Config{
				Kernel: "k", Initrd: "i", AgentSocket: "/run/vgpud/instances/u.agent.sock",
				VFIOUser: []VFIOUserDevice{{ID: "vgpu0", Socket: "/run/vgpud/instances/u.vfio-user.sock"}, {ID: "vgpu1", Socket: `/tmp/a "b".sock`}},
			},
			want: append(argsHead("256M", 1, true, "k", "i", "console=ttyS0 panic=-1"),
				"-device", `{"driver":"vfio-user-pci","id":"vgpu0","addr":"0x10","socket":{"type":"unix","path":"/run/vgpud/instances/u.vfio-user.sock"}}`,
				"-device", `{"driver":"vfio-user-pci","id":"vgpu1","addr":"0x11","socket":{"type":"unix","path":"/tmp/a \"b\".sock"}}`,
				"-name", "vgpu-guest,debug-threads=on",
				"-device", "virtio-serial-pci,id=agentser,addr=0x8",
				"-chardev", "socket,id=agentch,path=/run/vgpud/instances/u.agent.sock,reconnect-ms=1000",
				"-device", "virtserialport,bus=agentser.0,chardev=agentch,name="+DefaultAgentPort,
				"-no-reboot",
			),
		},
		{
			name: "both transports",
			cfg: Config{
				Kernel: "k", Initrd: "i",
				Devices:  []ProxyDevice{{ID: "p0", FD: f}},
				VFIOUser: []VFIOUserDevice{{ID: "v0", Socket: "/s"}},
			},
			want: append(argsHead("256M", 1, true, "k", "i", "console=ttyS0 panic=-1"),
				"-device", "x-pci-proxy-dev,id=p0,fd=3,addr=0x10",
				"-device", `{"driver":"vfio-user-pci","id":"v0","addr":"0x11","socket":{"type":"unix","path":"/s"}}`,
				"-no-reboot",
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if diff := cmp.Diff(tt.want, tt.cfg.Args()); diff != "" {
				t.Errorf("Args() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	f := placeholderFD(t)
	ok := Config{Kernel: "k", Initrd: "i"}
	tests := []struct {
		name   string
		modify func(*Config)
	}{
		{"no kernel", func(c *Config) { c.Kernel = "" }},
		{"no initrd", func(c *Config) { c.Initrd = "" }},
		{"tiny memory", func(c *Config) { c.MemMiB = 1 }},
		{"negative cpus", func(c *Config) { c.CPUs = -1 }},
		{"quote in append", func(c *Config) { c.Append = `a="b c"` }},
		{"comma in qmp path", func(c *Config) { c.QMPSocket = "/tmp/a,b" }},
		{"comma in disk path", func(c *Config) { c.Disk = "/tmp/a,b.ext4" }},
		{"comma in share directory", func(c *Config) { c.Shares = []Share{{Tag: "t", Dir: "/tmp/a,b"}} }},
		{"share tag with comma", func(c *Config) { c.Shares = []Share{{Tag: "t,x", Dir: "/tmp"}} }},
		{"share without directory", func(c *Config) { c.Shares = []Share{{Tag: "t"}} }},
		{"empty id", func(c *Config) { c.Devices = []ProxyDevice{{FD: f}} }},
		{"id with comma", func(c *Config) { c.Devices = []ProxyDevice{{ID: "a,fd=9", FD: f}} }},
		{"id starting with digit", func(c *Config) { c.Devices = []ProxyDevice{{ID: "0a", FD: f}} }},
		{"duplicate id", func(c *Config) { c.Devices = []ProxyDevice{{ID: "a", FD: f}, {ID: "a", FD: f}} }},
		{"no fd", func(c *Config) { c.Devices = []ProxyDevice{{ID: "a"}} }},
		{"vfio-user without socket", func(c *Config) { c.VFIOUser = []VFIOUserDevice{{ID: "a"}} }},
		{"vfio-user socket path too long", func(c *Config) { c.VFIOUser = []VFIOUserDevice{{ID: "a", Socket: "/" + strings.Repeat("s", 107)}} }},
		{"vfio-user bad id", func(c *Config) { c.VFIOUser = []VFIOUserDevice{{ID: "a,b", Socket: "/s"}} }},
		{"id shared by the transports", func(c *Config) {
			c.Devices = []ProxyDevice{{ID: "a", FD: f}}
			c.VFIOUser = []VFIOUserDevice{{ID: "a", Socket: "/s"}}
		}},
		{"more vGPUs than slots", func(c *Config) {
			for i := range 17 {
				c.VFIOUser = append(c.VFIOUser, VFIOUserDevice{ID: fmt.Sprintf("v%d", i), Socket: "/s"})
			}
		}},
	}
	for _, tt := range tests {
		c := ok
		tt.modify(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", tt.name, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", ok, err)
	}
}

func TestCommandLine(t *testing.T) {
	c := Config{QEMU: "/usr/bin/qemu-system-x86_64", Kernel: "/a b/k", Initrd: "it's", Append: "vgpu.run=x"}
	got := c.CommandLine()
	for _, want := range []string{
		"/usr/bin/qemu-system-x86_64 -accel tcg ",
		" -kernel '/a b/k' -initrd 'it'\\''s' ",
		" -append 'console=ttyS0 panic=-1 vgpu.run=x' ",
		" -object memory-backend-memfd,id=mem,size=256M,share=on ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("CommandLine() = %s, want it to contain %q", got, want)
		}
	}
}

func TestArgsAgentChannel(t *testing.T) {
	c := Config{Kernel: "k", Initrd: "i", AgentSocket: "/run/vgpud/instances/u.agent.sock"}
	args := strings.Join(c.Args(), " ")
	for _, want := range []string{
		"-name vgpu-guest,debug-threads=on",
		"-device virtio-serial-pci,id=agentser,addr=0x8",
		"-chardev socket,id=agentch,path=/run/vgpud/instances/u.agent.sock,reconnect=1",
		"-device virtserialport,bus=agentser.0,chardev=agentch,name=" + DefaultAgentPort,
	} {
		if !strings.Contains(args, want) {
			t.Errorf("Args() = %s, want it to contain %q", args, want)
		}
	}
	if err := (Config{Kernel: "k", Initrd: "i", AgentSocket: "a,b"}).Validate(); err == nil {
		t.Errorf("Validate(agent socket with a comma) = nil")
	}
}

func TestArgsDisk(t *testing.T) {
	c := Config{Kernel: "k", Initrd: "i", Disk: "/b/guest/apps/rootfs.ext4", ExtraDevices: []string{"edu"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	want := []string{
		"-drive", "file=/b/guest/apps/rootfs.ext4,format=raw,if=none,id=disk0,readonly=on",
		"-device", "virtio-blk-pci,drive=disk0,addr=0x9",
		"-device", "edu",
		"-no-reboot",
	}
	wantTail(t, c.Args(), want)
	if got := strings.Join((Config{Kernel: "k", Initrd: "i"}).Args(), " "); strings.Contains(got, "-drive") {
		t.Errorf("Args() without Disk = %s, want no -drive", got)
	}
}

// TestArgsDiskSnapshotShares: a root disk written through a snapshot, and
// 9p shares, each read-only.
func TestArgsDiskSnapshotShares(t *testing.T) {
	c := Config{Kernel: "k", Initrd: "i", Disk: "/b/root.ext4", DiskSnapshot: true,
		Shares: []Share{{Tag: "vgpudtest", Dir: "/tmp/share"}, {Tag: "more", Dir: "/srv"}}}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	want := []string{
		"-drive", "file=/b/root.ext4,format=raw,if=none,id=disk0,snapshot=on",
		"-device", "virtio-blk-pci,drive=disk0,addr=0x9",
		"-fsdev", "local,id=share0,path=/tmp/share,security_model=none,readonly=on",
		"-device", "virtio-9p-pci,fsdev=share0,mount_tag=vgpudtest",
		"-fsdev", "local,id=share1,path=/srv,security_model=none,readonly=on",
		"-device", "virtio-9p-pci,fsdev=share1,mount_tag=more",
		"-no-reboot",
	}
	wantTail(t, c.Args(), want)
}

// TestDialProxy: the file is a connected socket whose other end is the
// listener's connection, and a missing socket is an error naming it.
func TestDialProxy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := DialProxy(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := f.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := DialProxy(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "none") {
		t.Fatalf("DialProxy of a missing socket: %v", err)
	}
}

// TestVFIOUserJSON: the -device value round-trips to what QEMU's JSON
// parser sees, whatever the socket path holds.
func TestVFIOUserJSON(t *testing.T) {
	for _, path := range []string{"/run/vgpud/instances/u.vfio-user.sock", `/tmp/q"uote\back,comma sp.sock`, "/tmp/ünï"} {
		var got struct {
			Driver, ID, Addr string
			Socket           struct{ Type, Path string }
		}
		arg := vfioUserJSON(VFIOUserDevice{ID: "vgpu3", Socket: path}, 0x13)
		if err := json.Unmarshal([]byte(arg), &got); err != nil {
			t.Fatalf("vfioUserJSON(%q) = %s: %v", path, arg, err)
		}
		if got.Driver != "vfio-user-pci" || got.ID != "vgpu3" || got.Addr != "0x13" || got.Socket.Type != "unix" || got.Socket.Path != path {
			t.Errorf("vfioUserJSON(%q) = %s, decoded %+v", path, arg, got)
		}
	}
}

// TestPrefixAndEnv: the process is Prefix, QEMU, its arguments; the
// command line shows Env before it.
func TestPrefixAndEnv(t *testing.T) {
	c := Config{QEMU: "qemu-system-x86_64", Kernel: "k", Initrd: "i", Prefix: []string{"/r/scripts/vmm-run.sh", "/r/build/vmm-root", "--"}, Env: []string{"VMM_RUN_BINDS=/run/x"}}
	argv := c.argv()
	if diff := cmp.Diff([]string{"/r/scripts/vmm-run.sh", "/r/build/vmm-root", "--", "qemu-system-x86_64", "-accel"}, argv[:5]); diff != "" {
		t.Errorf("argv() head mismatch (-want +got):\n%s", diff)
	}
	if got := c.CommandLine(); !strings.HasPrefix(got, "VMM_RUN_BINDS=/run/x /r/scripts/vmm-run.sh /r/build/vmm-root -- qemu-system-x86_64 -accel tcg ") {
		t.Errorf("CommandLine() = %s", got)
	}
}

// TestVMMRootApply: Apply prefixes the run script and binds exactly the
// directories the script does not bind itself.
func TestVMMRootApply(t *testing.T) {
	repo := t.TempDir()
	script := filepath.Join(repo, "scripts", "vmm-run.sh")
	root := filepath.Join(repo, "build", "vmm-root")
	if _, err := NewVMMRoot(script, root); err == nil {
		t.Fatalf("NewVMMRoot(missing) = nil error")
	}
	for _, p := range []string{script, filepath.Join(root, vmmStamp)} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewVMMRoot(script, root)
	if err != nil {
		t.Fatalf("NewVMMRoot = %v", err)
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // Env
	}{
		{"all bound already", Config{Kernel: filepath.Join(repo, "build/guest/vmlinuz"), Initrd: "/tmp/x/initramfs.cpio",
			VFIOUser: []VFIOUserDevice{{ID: "v", Socket: "/tmp/s/u.vfio-user.sock"}}}, nil},
		{"run dir and disk", Config{Kernel: filepath.Join(repo, "build/guest/vmlinuz"), Initrd: "/tmp/i", Disk: "/srv/img/rootfs.ext4",
			QMPSocket: "/run/vgpud/instances/u.qmp", AgentSocket: "/run/vgpud/instances/u.agent.sock",
			VFIOUser: []VFIOUserDevice{{ID: "v", Socket: "/run/vgpud/instances/u.vfio-user.sock"}}},
			[]string{"VMM_RUN_BINDS=/srv/img/rootfs.ext4:/run/vgpud/instances"}},
		{"kernel in /boot, socket in /", Config{Kernel: "/boot/vmlinuz", Initrd: "/tmp/i", QMPSocket: "/q.qmp"},
			[]string{"VMM_RUN_BINDS=/boot/vmlinuz"}},
		{"incoming unix socket", Config{Kernel: "/tmp/k", Initrd: "/tmp/i", Incoming: "unix:/var/lib/mig/in.sock"},
			[]string{"VMM_RUN_BINDS=/var/lib/mig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			r.Apply(&c)
			if diff := cmp.Diff([]string{script, root, "--"}, c.Prefix); diff != "" {
				t.Errorf("Prefix mismatch (-want +got):\n%s", diff)
			}
			if !c.Modern {
				t.Errorf("Modern = false after Apply")
			}
			if diff := cmp.Diff(tt.want, c.Env); diff != "" {
				t.Errorf("Env mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconnectSpelling: QEMU 7.2 knows only reconnect=, QEMU 11 only
// reconnect-ms=.
func TestReconnectSpelling(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Kernel: "k", Initrd: "i", AgentSocket: "/a"}, "socket,id=agentch,path=/a,reconnect=1"},
		{Config{Kernel: "k", Initrd: "i", AgentSocket: "/a", Modern: true}, "socket,id=agentch,path=/a,reconnect-ms=1000"},
		{Config{Kernel: "k", Initrd: "i", AgentSocket: "/a", VFIOUser: []VFIOUserDevice{{ID: "v", Socket: "/s"}}}, "socket,id=agentch,path=/a,reconnect-ms=1000"},
	} {
		if args := tt.cfg.Args(); !slices.Contains(args, tt.want) {
			t.Errorf("Args(modern %v, %d vfio-user) = %q, want %q among them", tt.cfg.Modern, len(tt.cfg.VFIOUser), args, tt.want)
		}
	}
}

// argsHead is how every command line starts: the machine with mem of
// guest RAM (a memfd, sealed for vfio-user) and cpus, a serial console,
// the kernel, initrd and append line.
func argsHead(mem string, cpus int, sealed bool, kernel, initrd, appendLine string) []string {
	memfd := "memory-backend-memfd,id=mem,size=" + mem + ",share=on"
	if sealed {
		memfd += ",seal=on"
	}
	return []string{
		"-accel", "tcg",
		"-machine", "pc,memory-backend=mem",
		"-object", memfd,
		"-m", mem, "-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd,
		"-append", appendLine,
	}
}

// wantTail checks that args ends with want.
func wantTail(t *testing.T, args, want []string) {
	t.Helper()
	if len(args) < len(want) {
		t.Fatalf("Args() = %q, too short", args)
	}
	if diff := cmp.Diff(want, args[len(args)-len(want):]); diff != "" {
		t.Errorf("Args() tail mismatch (-want +got):\n%s", diff)
	}
}
