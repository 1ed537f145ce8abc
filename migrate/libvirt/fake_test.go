package libvirt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

// fakeVirsh stands in for virsh and libvirtd in the unit tests: domains
// with a state, metadata and a QEMU whose proxy devices are real mpqemu
// clients (mpqemutest.VM) on the descriptors the Attacher passes, so that
// a plugged instance is attached as it is with QEMU. The real virsh is
// exercised by tests/libvirt_test.go.
type fakeVirsh struct {
	t *testing.T

	mu    sync.Mutex
	doms  []*fakeDom
	calls []string
	// ejectPolls is how many query-pci a deleted device survives (the
	// guest taking its time to eject it).
	ejectPolls int
	// failAdd makes device_add fail.
	failAdd bool
	// plugged gets the domain's name after each successful device_add.
	plugged chan string
	streams chan *fakeStream
}

type fakeDom struct {
	name, uuid string
	state      string
	persistent bool
	meta       string // what virsh metadata prints; "" none
	metaFlags  []string
	fds        map[string]*os.File
	devs       map[string]*fakeDev
	// xml is what dumpxml prints and define replaces; failStart makes
	// start fail.
	xml       string
	failStart bool
	// migrateXML is the --xml a migrate was given.
	migrateXML string
}

type fakeDev struct {
	slot    int
	vm      *mpqemutest.VM // nil: a device on a dead socket
	deleted int            // query-pci polls left before it is gone; -1 not deleted
}

// fakeStream is one `virsh event` child.
type fakeStream struct {
	w    *io.PipeWriter
	once sync.Once
	done chan struct{}
}

// send writes a line as virsh event would.
func (s *fakeStream) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.w, line+"\n"); err != nil {
		t.Fatalf("event line: %v", err)
	}
}

// end makes the child exit.
func (s *fakeStream) end() { s.once.Do(func() { close(s.done) }) }

func newFake(t *testing.T, doms ...*fakeDom) *fakeVirsh {
	f := &fakeVirsh{t: t, doms: doms, plugged: make(chan string, 16), streams: make(chan *fakeStream, 16)}
	for _, d := range doms {
		if d.devs == nil {
			d.devs = make(map[string]*fakeDev)
		}
		d.fds = make(map[string]*os.File)
	}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, d := range f.doms {
			d.stop()
		}
	})
	return f
}

// stop is QEMU exiting: its devices' connections close.
func (d *fakeDom) stop() {
	for id, dev := range d.devs {
		if dev.vm != nil {
			dev.vm.Close()
		}
		delete(d.devs, id)
	}
	for n, f := range d.fds {
		f.Close()
		delete(d.fds, n)
	}
}

func (f *fakeVirsh) find(name string) *fakeDom {
	for _, d := range f.doms {
		if d.name == name || d.uuid == name {
			return d
		}
	}
	return nil
}

// called returns the calls so far, each as "verb domain-name".
func (f *fakeVirsh) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func verr(args []string, msg string) error {
	return &VirshError{Args: args, Code: 1, Message: msg, err: fmt.Errorf("exit status 1")}
}

// opt returns the value after flag in args.
func opt(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

func (f *fakeVirsh) Run(ctx context.Context, files []*os.File, args ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(args) == 0 {
		return nil, verr(args, "no command")
	}
	if args[0] == "list" {
		f.calls = append(f.calls, "list")
		var b strings.Builder
		for _, d := range f.doms {
			if d.state != StateShutOff {
				b.WriteString(d.name + "\n")
			}
		}
		return []byte(b.String() + "\n"), nil
	}
	if args[0] == "define" {
		// The definition comes through descriptor 3 (/dev/fd/3).
		if p, _ := opt(args, "--file"); p != "/dev/fd/3" || len(files) != 1 {
			return nil, verr(args, "define: want --file /dev/fd/3 and one file")
		}
		b, err := io.ReadAll(files[0])
		if err != nil {
			return nil, verr(args, err.Error())
		}
		for _, d := range f.doms {
			if strings.Contains(string(b), "<name>"+d.name+"</name>") {
				d.xml = string(b)
				f.calls = append(f.calls, "define "+d.name)
				return nil, nil
			}
		}
		return nil, verr(args, "define: no such domain")
	}
	name, _ := opt(args, "--domain")
	d := f.find(name)
	if d == nil {
		return nil, verr(args, fmt.Sprintf("failed to get domain '%s'", name))
	}
	call := args[0] + " " + d.name
	switch args[0] {
	case "dominfo":
		p := "no"
		if d.persistent {
			p = "yes"
		}
		f.calls = append(f.calls, call)
		return fmt.Appendf(nil, "Id:             3\nName:           %s\nUUID:           %s\nOS Type:        hvm\nState:          %s\nPersistent:     %s\n\n",
			d.name, d.uuid, d.state, p), nil
	case "metadata":
		if uri, _ := opt(args, "--uri"); uri != MetadataURI {
			return nil, verr(args, "metadata not found: Requested metadata element is not present")
		}
		if xml, ok := opt(args, "--set"); ok {
			if key, _ := opt(args, "--key"); key != MetadataKey {
				return nil, verr(args, "bad key "+key)
			}
			call = "metadata-set " + d.name
			d.meta = xml
			d.metaFlags = nil
			for _, fl := range []string{"--live", "--config"} {
				if slices.Contains(args, fl) {
					d.metaFlags = append(d.metaFlags, fl)
				}
			}
			f.calls = append(f.calls, call)
			return nil, nil
		}
		f.calls = append(f.calls, call)
		if d.meta == "" {
			return nil, verr(args, "metadata not found: Requested metadata element is not present")
		}
		return []byte(d.meta + "\n"), nil
	case "migrate":
		// Recorded with its flags and the --xml it was given.
		call = strings.Join(args, " ")
		if len(files) == 1 {
			b, err := io.ReadAll(files[0])
			if err != nil {
				return nil, verr(args, err.Error())
			}
			d.migrateXML = string(b)
		}
		f.calls = append(f.calls, call)
		return nil, nil
	case "dumpxml":
		f.calls = append(f.calls, call)
		return []byte(d.xml), nil
	case "start":
		f.calls = append(f.calls, call)
		if d.failStart {
			return nil, verr(args, "internal error: QEMU unexpectedly closed the monitor")
		}
		if d.state != StateShutOff {
			return nil, verr(args, "Requested operation is not valid: domain is already running")
		}
		d.state = StateRunning
		if slices.Contains(args, "--paused") {
			d.state = StatePaused
		}
		return nil, nil
	case "resume":
		f.calls = append(f.calls, call)
		d.state = StateRunning
		return nil, nil
	case "destroy":
		f.calls = append(f.calls, call)
		d.state = StateShutOff
		d.stop()
		return nil, nil
	case "qemu-monitor-command":
		return f.qmp(d, files, args)
	}
	return nil, verr(args, "unknown command "+args[0])
}

// qmp answers a qemu-monitor-command as QEMU would, printed as virsh
// prints it.
func (f *fakeVirsh) qmp(d *fakeDom, files []*os.File, args []string) ([]byte, error) {
	if d.state == StateShutOff {
		return nil, verr(args, "Requested operation is not valid: domain is not running")
	}
	js, _ := opt(args, "--cmd")
	var cmd struct {
		Execute   string         `json:"execute"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(js), &cmd); err != nil {
		return nil, verr(args, "bad json: "+err.Error())
	}
	f.calls = append(f.calls, cmd.Execute+" "+d.name)
	fds, _ := opt(args, "--pass-fds")
	if (fds != "") != (len(files) > 0) || (fds != "" && fds != "3") {
		f.t.Errorf("--pass-fds %q with %d files", fds, len(files))
	}
	ok := func(ret any) ([]byte, error) {
		b, _ := json.Marshal(map[string]any{"return": ret, "id": "libvirt-7"})
		return append(b, '\n', '\n'), nil
	}
	fail := func(class, desc string) ([]byte, error) {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"class": class, "desc": desc}, "id": "libvirt-7"})
		return append(b, '\n', '\n'), nil
	}
	switch cmd.Execute {
	case "query-pci":
		type dev struct {
			Bus    int    `json:"bus"`
			Slot   int    `json:"slot"`
			QdevID string `json:"qdev_id"`
		}
		devs := []dev{{Slot: 0}, {Slot: 1}}
		for id, dv := range d.devs {
			if dv.deleted == 0 {
				delete(d.devs, id)
				continue
			}
			if dv.deleted > 0 {
				dv.deleted--
			}
			devs = append(devs, dev{Slot: dv.slot, QdevID: id})
		}
		return ok([]map[string]any{{"bus": 0, "devices": devs}})
	case "getfd":
		if len(files) != 1 {
			return fail("GenericError", "No file descriptor supplied via SCM_RIGHTS")
		}
		fd, err := dupFile(files[0])
		if err != nil {
			return nil, verr(args, err.Error())
		}
		name, _ := cmd.Arguments["fdname"].(string)
		if old := d.fds[name]; old != nil {
			old.Close()
		}
		d.fds[name] = fd
		return ok(map[string]any{})
	case "closefd":
		name, _ := cmd.Arguments["fdname"].(string)
		if fd := d.fds[name]; fd != nil {
			fd.Close()
			delete(d.fds, name)
			return ok(map[string]any{})
		}
		return fail("GenericError", "File descriptor named '"+name+"' not found")
	case "device_add":
		id, _ := cmd.Arguments["id"].(string)
		name, _ := cmd.Arguments["fd"].(string)
		addr, _ := cmd.Arguments["addr"].(string)
		if cmd.Arguments["driver"] != "x-pci-proxy-dev" {
			return fail("GenericError", "wrong driver")
		}
		if _, dup := d.devs[id]; dup {
			return fail("GenericError", "Duplicate device ID '"+id+"'")
		}
		fd := d.fds[name]
		if fd == nil || f.failAdd {
			return fail("GenericError", "failed to find file '"+name+"'")
		}
		delete(d.fds, name)
		var slot int
		if _, err := fmt.Sscanf(addr, "0x%x", &slot); err != nil {
			return fail("GenericError", "bad addr "+addr)
		}
		// QEMU's realize probes the config space over the socket: the
		// instance is attached once device_add returns.
		c, err := net.FileConn(fd)
		fd.Close()
		if err != nil {
			return nil, verr(args, err.Error())
		}
		vm, err := mpqemutest.NewVM(c.(*net.UnixConn), mpqemutest.MinRAM)
		if err != nil {
			return fail("GenericError", "realize: "+err.Error())
		}
		d.devs[id] = &fakeDev{slot: slot, vm: vm, deleted: -1}
		f.plugged <- d.name
		return ok(map[string]any{})
	case "device_del":
		id, _ := cmd.Arguments["id"].(string)
		dv := d.devs[id]
		if dv == nil {
			return fail("DeviceNotFound", "Device '"+id+"' not found")
		}
		// The guest ejects it: QEMU closes the connection.
		if dv.vm != nil {
			dv.vm.Close()
			dv.vm = nil
		}
		dv.deleted = f.ejectPolls
		return ok(map[string]any{})
	}
	return fail("CommandNotFound", "The command "+cmd.Execute+" has not been found")
}

// dupFile is QEMU receiving the descriptor: its own copy.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "qemu-fd"), nil
}

func (f *fakeVirsh) Start(ctx context.Context, args ...string) (io.ReadCloser, func() error, error) {
	if want := []string{"event", "--loop", "--event", "lifecycle"}; !slices.Equal(args, want) {
		f.t.Errorf("Start(%q), want %q", args, want)
	}
	pr, pw := io.Pipe()
	s := &fakeStream{w: pw, done: make(chan struct{})}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-ctx.Done():
		case <-s.done:
		}
		pw.Close()
	}()
	f.streams <- s
	return pr, func() error {
		<-exited
		if ctx.Err() != nil {
			return fmt.Errorf("signal: killed")
		}
		return fmt.Errorf("exit status 1")
	}, nil
}

// recv waits for the next value of ch (a hang guard, not a timing).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
		panic("unreachable")
	}
}
