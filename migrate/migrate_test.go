package migrate_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/migratetest"
	"github.com/vgpud/vgpud/migrate/qmp/qmptest"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

const testID = "6f0c1c52-1111-4a3b-9c3e-000000000001"

// destination runs a Destination over a real manager (worker processes on
// the OpenCL device) whose instance testID will find a fake QEMU
// monitor waiting for an incoming migration.
func destination(t *testing.T, tlsDir string) (*mdev.Manager, string) {
	t.Helper()
	m, _, addr := destinationQMP(t, tlsDir)
	return m, addr
}

// destinationQMP is destination that also returns the fake monitor.
func destinationQMP(t *testing.T, tlsDir string) (*mdev.Manager, *qmptest.Server, string) {
	t.Helper()
	return destinationOn(t, tlsDir, mpqemu.Transport{})
}

// destinationOn is destinationQMP over a manager whose VMs attach by tr.
func destinationOn(t *testing.T, tlsDir string, tr transport.Socket) (*mdev.Manager, *qmptest.Server, string) {
	t.Helper()
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
	}
	// Short: an instance's vfio-user socket path must fit a Unix socket
	// address.
	sockDir, err := os.MkdirTemp("", "mt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, SocketDir: sockDir, Transport: tr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	q := qmptest.NewServer(t)
	q.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
		return map[string]any{"running": false, "status": "inmigrate"}, nil
	})
	if err := os.Symlink(q.Path(), filepath.Join(sockDir, testID+".qmp")); err != nil {
		t.Fatal(err)
	}
	dst := &migrate.Destination{Manager: m, TLS: migratetest.Load(t, tlsDir), StepTimeout: 20 * time.Second, ResumeTimeout: 100 * time.Millisecond}
	return m, q, serveDestination(t, dst, m, d)
}

// serveDestination serves dst on a loopback port until the test ends,
// then closes m and d (the manager and device behind dst); it returns the
// port's address.
func serveDestination(t *testing.T, dst *migrate.Destination, m *mdev.Manager, d gpu.Device) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dst.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		m.Close()
		d.Close()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr, tlsDir string) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, migratetest.Load(t, tlsDir).Client("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func reply(t *testing.T, r *bufio.Reader) migrate.Reply {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	var rep migrate.Reply
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatalf("reply %q: %v", line, err)
	}
	return rep
}

// TestDestinationRefusesStrangers: a peer whose certificate another CA
// signed does not get past the handshake.
func TestDestinationRefusesStrangers(t *testing.T) {
	ca := migratetest.NewCA(t)
	m, addr := destination(t, ca.HostDir(t))
	stranger := migratetest.NewCA(t).HostDir(t)
	c, err := tls.Dial("tcp", addr, migratetest.Load(t, stranger).Client("127.0.0.1"))
	if err == nil {
		// TLS 1.3: the server's verdict on the client certificate arrives
		// with the first read.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a stranger's connection: %v, want a certificate error", err)
	}
	if n := len(m.List()); n != 0 {
		t.Errorf("%d instances after a refused peer", n)
	}
}

// TestDestinationRefusesCorruptStream: a round with a corrupted record is
// refused with the record named, and the instance created for the
// migration is discarded.
func TestDestinationRefusesCorruptStream(t *testing.T) {
	ca := migratetest.NewCA(t)
	m, addr := destination(t, ca.HostDir(t))
	// A valid buffer, then a record whose payload does not match its CRC.
	c, r := startRound(t, m, addr, ca.HostDir(t))
	bad := []byte{byte(stream.TypeBufferFree), 0, 0, 0, 4, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 1, 0, 0, 0}
	if _, err := c.Write(bad); err != nil {
		t.Fatal(err)
	}
	rep := reply(t, r)
	if rep.Step != "round" || !strings.Contains(rep.Error, "checksum") {
		t.Fatalf("corrupt round: %+v, want a checksum error", rep)
	}
	// The destination drops the connection and the instance.
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("connection still open after a corrupt stream")
	}
	waitDiscarded(t, m)
}

// startRound opens a migration of testID to the destination at addr:
// the Instance record (its reply checked, the instance made), then the
// first round's first record, a valid Buffer.
func startRound(t *testing.T, m *mdev.Manager, addr, tlsDir string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dial(t, addr, tlsDir)
	r := bufio.NewReader(c)
	w := stream.NewWriter(c)
	if err := w.Write(&stream.Instance{ID: testID, Profile: "vgpu-small", MemBytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	if rep := reply(t, r); rep.Step != "instance" || rep.Error != "" {
		t.Fatalf("instance step: %+v", rep)
	}
	if _, err := m.Get(testID); err != nil {
		t.Fatalf("no instance on the destination: %v", err)
	}
	if err := w.Write(&stream.Buffer{Handle: 1, Size: 4096}); err != nil {
		t.Fatal(err)
	}
	return c, r
}

// waitDiscarded waits until the destination m has discarded the failed
// migration's instance.
func waitDiscarded(t *testing.T, m *mdev.Manager) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := m.Get(testID); errors.Is(err, mdev.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed migration's instance was not discarded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDestinationTakesAbortBetweenRecords: a source that rolls back while
// the destination waits for a round's records (a live migration's final
// round waits for QEMU's copy) sends its abort line where a record would
// start; the destination reads it as the abort it is, not as a corrupt
// record, and discards the instance. A line other than an abort there is
// corrupt.
func TestDestinationTakesAbortBetweenRecords(t *testing.T) {
	ca := migratetest.NewCA(t)
	m, addr := destination(t, ca.HostDir(t))
	for _, tt := range []struct{ line, want string }{
		{`{"do":"abort","why":"QEMU failed"}` + "\n", "aborted by the source: QEMU failed"},
		{`{"do":"commit"}` + "\n", "corrupt"},
	} {
		c, r := startRound(t, m, addr, ca.HostDir(t))
		if _, err := c.Write([]byte(tt.line)); err != nil {
			t.Fatal(err)
		}
		if rep := reply(t, r); rep.Step != "round" || !strings.Contains(rep.Error, tt.want) {
			t.Fatalf("%q inside a round: %+v, want an error containing %q", tt.line, rep, tt.want)
		}
		waitDiscarded(t, m)
		c.Close()
	}
}

// TestDestinationRefusesOverQuota: a buffer larger than the profile
// allows fails the first round, before the source would stop its guest.
func TestDestinationRefusesOverQuota(t *testing.T) {
	ca := migratetest.NewCA(t)
	_, addr := destination(t, ca.HostDir(t))
	c := dial(t, addr, ca.HostDir(t))
	r := bufio.NewReader(c)
	w := stream.NewWriter(c)
	for _, rec := range []stream.Record{
		&stream.Instance{ID: testID, Profile: "vgpu-small", MemBytes: 256 << 20},
		&stream.Buffer{Handle: 1, Size: 512 << 20},
		&stream.Round{Number: 0},
	} {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if rep := reply(t, r); rep.Step != "instance" {
		t.Fatalf("instance step: %+v", rep)
	}
	if rep := reply(t, r); rep.Step != "round" || !strings.Contains(rep.Error, "quota") {
		t.Fatalf("over-quota round: %+v, want a quota error", rep)
	}
}

// TestDestinationRunsOnlyOnGo: after the commit step the destination holds
// the VM paused with the vGPU plugged; it lets QEMU run it only when the
// source says "go". A link lost before that makes it quit its QEMU and
// discard the instance, so the source can safely take the VM back.
func TestDestinationRunsOnlyOnGo(t *testing.T) {
	for _, tt := range []struct {
		name string
		goes bool
	}{{"go", true}, {"cut", false}} {
		t.Run(tt.name, func(t *testing.T) {
			ca := migratetest.NewCA(t)
			m, q, addr := destinationQMP(t, ca.HostDir(t))
			status := fakeQEMU(q)
			c := dial(t, addr, ca.HostDir(t))
			r := bufio.NewReader(c)
			w := stream.NewWriter(c)
			for _, rec := range []stream.Record{
				&stream.Instance{ID: testID, Profile: "vgpu-small", MemBytes: 256 << 20},
				&stream.Ring{},
				&stream.Round{Number: 0, Final: true},
			} {
				if err := w.Write(rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if rep := reply(t, r); rep.Step != "instance" || rep.Error != "" {
				t.Fatalf("instance step: %+v", rep)
			}
			if rep := reply(t, r); rep.Step != "round" || rep.Error != "" {
				t.Fatalf("final round: %+v", rep)
			}
			status.Store("paused") // QEMU received the VM (-S)
			if _, err := c.Write([]byte(`{"do":"commit","device_id":"vgpu0","slot":5}` + "\n")); err != nil {
				t.Fatal(err)
			}
			if rep := reply(t, r); rep.Step != "commit" || rep.Error != "" {
				t.Fatalf("commit: %+v", rep)
			}
			if cmds := names(q.Commands()); slices.Contains(cmds, "cont") || !slices.Contains(cmds, "device_add") {
				t.Fatalf("after commit QEMU was told %q: want device_add and no cont", cmds)
			}
			if tt.goes {
				if _, err := c.Write([]byte(`{"do":"go"}` + "\n")); err != nil {
					t.Fatal(err)
				}
				if rep := reply(t, r); rep.Step != "go" || rep.Error != "" {
					t.Fatalf("go: %+v", rep)
				}
				if _, err := m.Get(testID); err != nil {
					t.Errorf("the migrated instance is gone: %v", err)
				}
				if cmds := names(q.Commands()); !slices.Contains(cmds, "cont") || slices.Contains(cmds, "quit") {
					t.Errorf("after go QEMU was told %q: want cont and no quit", cmds)
				}
				return
			}
			c.Close()
			for deadline := time.Now().Add(20 * time.Second); ; {
				_, err := m.Get(testID)
				if errors.Is(err, mdev.ErrNotFound) && slices.Contains(names(q.Commands()), "quit") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("link lost before go: instance %v, QEMU told %q; want it discarded and quit", err, names(q.Commands()))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if slices.Contains(names(q.Commands()), "cont") {
				t.Errorf("QEMU was told to run the VM without go: %q", names(q.Commands()))
			}
		})
	}
}

// fakeQEMU makes q answer as a destination QEMU waiting with -incoming:
// query-status reports the returned status (set it to what QEMU would be
// in: "paused" once the VM arrived), cont makes it "running", getfd,
// device_add, closefd and quit succeed.
func fakeQEMU(q *qmptest.Server) *atomic.Value {
	var status atomic.Value
	status.Store("inmigrate")
	q.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
		return map[string]any{"running": status.Load() == "running", "status": status.Load()}, nil
	})
	ok := func(json.RawMessage, []*os.File) (any, error) { return map[string]any{}, nil }
	for _, c := range []string{"getfd", "device_add", "closefd", "quit"} {
		q.Handle(c, ok)
	}
	q.Handle("cont", func(json.RawMessage, []*os.File) (any, error) {
		status.Store("running")
		return map[string]any{}, nil
	})
	return &status
}

func names(cs []qmptest.Command) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func TestShrinking(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		prev, cur uint64
		want      bool
	}{
		{256 * mib, 512 << 10, false}, // converged: the final round is small
		{256 * mib, 256 * mib, false}, // everything dirtied again
		{256 * mib, 200 * mib, false}, // shrank by less than a quarter
		{256 * mib, 100 * mib, true},  // still shrinking
		{4 * mib, 2 * mib, true},
		{0, 2 * mib, false}, // grew
	} {
		if got := migrate.Shrinking(tt.prev, tt.cur, mib); got != tt.want {
			t.Errorf("shrinking(%d, %d) = %v, want %v", tt.prev, tt.cur, got, tt.want)
		}
	}
}
