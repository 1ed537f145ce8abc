package mdev

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

// peekKernel reads 64 bytes at an address the guest gives as an integer.
const peekKernel = `__kernel void peek(__global uchar *out, ulong addr) {
	size_t i = get_global_id(0);
	out[i] = ((__global uchar *)addr)[i];
}`

// markerGPA is a page of low RAM, which the harness VM never hands out
// for DMA: no command of the guest's touches it.
const markerGPA = 0x10000

// TestKernelCannotReachGuestRAM (issue 31): a guest's kernel casts the
// address at which its worker maps a page of the VM's RAM, one no DMA
// touches and which holds a marker, to a pointer and reads it. With
// executors (the default on a CPU device) the kernel runs in a process
// that maps no guest RAM at all: it does not read the marker (its
// device is lost, or it reads other bytes). With kernels in the worker
// (the design before executors) the same kernel reads the marker, so the
// test sees what it looks for: a guest's kernel could read and write the
// guest kernel's and every other process's memory.
func TestKernelCannotReachGuestRAM(t *testing.T) {
	for _, inWorker := range []bool{false, true} {
		name := "executor"
		if inWorker {
			name = "kernels-in-worker"
		}
		t.Run(name, func(t *testing.T) {
			m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, Profiles: []Profile{patientProfile}, KernelsInWorker: inWorker})
			if got := m.Pool().KernelsInExecutor(0); got == inWorker {
				t.Fatalf("KernelsInExecutor = %v with KernelsInWorker %v", got, inWorker)
			}
			inst := mustCreate(t, m, CreateRequest{Profile: patientProfile.Name})
			_, d, marker := markedGuest(t, inst)
			p, log, err := d.Build(peekKernel, "")
			if err != nil {
				t.Fatalf("build: %v\n%s", err, log)
			}
			out, err := d.CreateBuffer(64)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Finish(); err != nil {
				t.Fatal(err)
			}

			worker := inst.WorkerPID()
			addr, err := mappedAt(worker, "mpqemutest-ram", markerGPA)
			if err != nil {
				t.Fatalf("the worker (%d) does not map the marker's page: %v", worker, err)
			}
			execs := addrspacetest.Children(worker)
			if inWorker != (len(execs) == 0) {
				t.Fatalf("the worker %d has children %v; kernels in the worker: %v", worker, execs, inWorker)
			}
			for _, e := range execs {
				maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", e))
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(maps), "mpqemutest-ram") {
					t.Errorf("the executor %d maps guest RAM:\n%s", e, maps)
				}
				// Its descriptors: no guest RAM, and one socket, its own
				// end of the executor protocol (not the worker's sockets).
				fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", e))
				sockets := 0
				for _, fd := range fds {
					l, _ := os.Readlink(fd)
					if strings.Contains(l, "mpqemutest-ram") {
						t.Errorf("the executor %d holds guest RAM: %s -> %s", e, fd, l)
					}
					if strings.HasPrefix(l, "socket:") {
						sockets++
					}
				}
				if sockets != 1 {
					t.Errorf("the executor %d holds %d sockets, want 1 (its own)", e, sockets)
				}
			}

			err = d.Launch(p, "peek", driver.Range1(64, 0), driver.BufferArg(out), driver.Uint64Arg(addr))
			got := make([]byte, 64)
			if err == nil {
				err = d.Read(out, 0, got)
			}
			if err == nil {
				err = d.Finish()
			}
			switch {
			case inWorker && (err != nil || !bytes.Equal(got, marker)):
				t.Errorf("kernels in the worker: the kernel did not read the marker at %#x (%v): the test proves nothing", addr, err)
			case !inWorker && err == nil && bytes.Equal(got, marker):
				t.Errorf("a kernel read its VM's RAM at %#x through the executor", addr)
			case !inWorker && err != nil && !errors.Is(err, driver.ErrDeviceLost):
				t.Errorf("peek in the executor: %v, want the device lost or other bytes", err)
			default:
				t.Logf("peek at %#x (the worker's mapping of guest page %#x): err %v, marker read: %v", addr, markerGPA, err, bytes.Equal(got, marker))
			}
		})
	}
}

// shortDir is a socket directory for a test: not t.TempDir(), whose long
// path would push the sockets' paths past a sockaddr_un's 107 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newExecutorManager is NewManager(cfg) on the mpqemu transport with its
// sockets in a shortDir, closed at the test's end: the manager of the
// tests that run kernels in executors.
func newExecutorManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	cfg.SocketDir, cfg.Transport = shortDir(t), mpqemu.Transport{}
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// markedGuest attaches a harness VM to inst, places a random marker in a
// page of its RAM that no DMA touches (markerGPA) and opens the driver.
func markedGuest(t *testing.T, inst *Instance) (*mpqemutest.VM, *driver.Device, []byte) {
	t.Helper()
	vm := attach(t, inst)
	marker := make([]byte, 64)
	rand.Read(marker)
	if err := vm.WriteRAM(markerGPA, marker); err != nil {
		t.Fatal(err)
	}
	d, err := driver.Open(vm, vm, driver.Options{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return vm, d, marker
}

// mappedAt returns the address at which process pid maps offset off of
// the memfd called name.
func mappedAt(pid int, name string, off uint64) (uint64, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.Contains(f[5], "memfd:"+name) {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		foff, err3 := strconv.ParseUint(f[2], 16, 64)
		if errors.Join(err1, err2, err3) != nil {
			continue
		}
		if off >= foff && off < foff+(end-start) {
			return start + off - foff, nil
		}
	}
	return 0, fmt.Errorf("no mapping of memfd:%s offset %#x", name, off)
}

// TestExecutorBuffersStayOffItsSocket (issue 42): a worker and its
// executors share the executors' buffer memory (arenas the main process
// made), so a guest's 4 MiB upload, a kernel on it in the executor and
// the 4 MiB download of its result are memory copies in the worker: the
// executor reads and writes far less than the data on its socket
// (/proc/pid/io counts every byte it moved through read and write
// calls), both map the arena, and the result is right. So on the default
// ring, whose executor the worker starts at its hello, and on a device
// context, whose executor and arena come with the context.
func TestExecutorBuffersStayOffItsSocket(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, Profiles: []Profile{contextProfile}})
	if !m.Pool().KernelsInExecutor(0) {
		t.Fatal("no executor on a CPU device")
	}
	inst := mustCreate(t, m, CreateRequest{Profile: contextProfile.Name})
	_, d, _ := markedGuest(t, inst)
	worker := inst.WorkerPID()
	t.Run("default ring", func(t *testing.T) {
		execs := addrspacetest.Children(worker)
		if len(execs) != 1 {
			t.Fatalf("the worker %d has children %v, want its executor", worker, execs)
		}
		bytesStayOffSocket(t, d, worker, execs[0])
	})
	t.Run("context", func(t *testing.T) {
		c, exe := openContext(t, d, worker, driver.ContextOptions{ID: 1, MemLimit: 64 << 20})
		defer c.Close()
		bytesStayOffSocket(t, c, worker, exe)
	})
}

// bytesStayOffSocket uploads 4 MiB through d, runs a kernel on them and
// downloads the result, and checks that executor exe, a child of worker,
// moved under 64 KiB through its socket meanwhile and that both map an
// arena.
func bytesStayOffSocket(t *testing.T, d *driver.Device, worker, exe int) {
	t.Helper()
	const size = 4 << 20
	buf, err := d.CreateBuffer(size)
	if err != nil {
		t.Fatal(err)
	}
	p, log, err := d.Build(`__kernel void twice(__global uint *a) { a[get_global_id(0)] *= 2; }`, "")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	// Once before measuring: PoCL compiles the kernel for its range at
	// the first launch, reading and writing files.
	if err := d.Launch(p, "twice", driver.Range1(size/4, 0), driver.BufferArg(buf)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{worker, exe} {
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(maps), "vgpud-executor-arena") {
			t.Errorf("process %d does not map an executor's arena", pid)
		}
	}
	data, got := make([]byte, size), make([]byte, size)
	rand.Read(data)
	before := ioBytes(t, exe)
	if err := d.Write(buf, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "twice", driver.Range1(size/4, 0), driver.BufferArg(buf)); err != nil {
		t.Fatal(err)
	}
	if err := d.Read(buf, 0, got); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	moved := ioBytes(t, exe) - before
	for i := 0; i < size; i += 4 {
		if w := binary.LittleEndian.Uint32(data[i:]) * 2; binary.LittleEndian.Uint32(got[i:]) != w {
			t.Fatalf("word %d of the result = %#x, want %#x", i/4, binary.LittleEndian.Uint32(got[i:]), w)
		}
	}
	if moved >= 64<<10 {
		t.Errorf("the executor moved %d bytes through its socket for a %d-byte upload, a launch and a download, want under 64 KiB", moved, size)
	}
	t.Logf("the executor moved %d bytes through its socket", moved)
}

// ioBytes is what process pid read and wrote through read and write
// calls so far (/proc/pid/io rchar + wchar).
func ioBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		if k == "rchar" || k == "wchar" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/io: %q: %v", pid, line, err)
			}
			n += x
		}
	}
	return n
}
