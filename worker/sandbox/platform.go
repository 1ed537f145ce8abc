package sandbox

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Platform is one OpenCL implementation the ICD loader loads on this host,
// as far as a worker's sandbox must know it: the vendor file that names
// it, the library it names with that library's dependency closure, and
// what the vendor's runtime opens besides (device nodes, driver files in
// /proc and /sys). FindPlatforms finds them; PlatformPolicy turns them into
// a worker's Policy.
type Platform struct {
	// Vendor is the implementation, told from its library's name: one
	// of the Vendor* constants.
	Vendor string `json:"vendor"`
	// ICD is the vendor file (/etc/OpenCL/vendors/*.icd), or "" when the
	// library was named by OCL_ICD_FILENAMES.
	ICD string `json:"icd,omitempty"`
	// VendorDir is the directory the loader lists for vendor files
	// (/etc/OpenCL/vendors, or the one OCL_ICD_VENDORS or
	// OPENCL_VENDOR_PATH names); "" when the loader was given one file
	// or the libraries themselves.
	VendorDir string `json:"vendor_dir,omitempty"`
	// Library is the library the vendor file names, resolved as the
	// dynamic loader would (its path; the name itself when it was not
	// found, with Missing saying so).
	Library string `json:"library"`
	// Libraries are Library and every library it needs, transitively
	// (DT_NEEDED, searched by DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH,
	// ld.so.conf and the default directories), by the paths found.
	Libraries []string `json:"libraries,omitempty"`
	// Dirs are the directories of the libraries outside the system's
	// library directories: a vendor runtime loads siblings of its library
	// with dlopen (NVIDIA's loads libcuda, libnvidia-ptxjitcompiler and
	// libnvidia-nvvm so), which no ELF header names.
	Dirs []string `json:"dirs,omitempty"`
	// Devices are the vendor's device nodes present on this host.
	Devices []string `json:"devices,omitempty"`
	// Read are the vendor's other files (driver state in /proc and /sys,
	// data files) present on this host.
	Read []string `json:"read,omitempty"`
	// Exec are programs the vendor's runtime runs (PoCL: the linker).
	Exec []string `json:"exec,omitempty"`
	// Syscalls are system calls the vendor's runtime makes beyond the
	// worker's allowlist.
	Syscalls []string `json:"syscalls,omitempty"`
	// SharedMemory: the runtime maps shared anonymous memory
	// (Policy.SharedMemory).
	SharedMemory bool `json:"shared_memory,omitempty"`
	// Missing are libraries named (by the vendor file or a DT_NEEDED
	// entry) and not found: the loader would fail on them too.
	Missing []string `json:"missing,omitempty"`
}

// Vendors, told from the library's file name (vendorOf).
const (
	VendorPoCL    = "pocl"
	VendorNVIDIA  = "nvidia"
	VendorAMD     = "amd"
	VendorIntel   = "intel"
	VendorMesa    = "mesa"
	VendorUnknown = "unknown"
)

// vendorOf tells the vendor from a library's file name.
func vendorOf(lib string) string {
	base := strings.ToLower(filepath.Base(lib))
	switch {
	case strings.HasPrefix(base, "libpocl"):
		return VendorPoCL
	case strings.HasPrefix(base, "libnvidia-opencl"):
		return VendorNVIDIA
	case strings.HasPrefix(base, "libamdocl"), strings.HasPrefix(base, "libamdhip"):
		return VendorAMD
	case strings.HasPrefix(base, "libigdrcl"):
		return VendorIntel
	case strings.HasPrefix(base, "librusticlopencl"), strings.HasPrefix(base, "libmesaopencl"):
		return VendorMesa
	}
	return VendorUnknown
}

// vendorNeeds is what each vendor's runtime opens besides its libraries,
// as glob patterns (a pattern that matches nothing on this host is left
// out): device nodes, which the worker opens read-write and uses ioctl on,
// other files it reads, programs it runs and system calls beyond the
// worker's allowlist. Sources: the drivers' documented device nodes
// (NVIDIA: /dev/nvidiactl, one /dev/nvidiaN per GPU, /dev/nvidia-uvm and
// its tools node, /dev/nvidia-caps for MIG; ROCm: /dev/kfd and the DRM
// render nodes; Intel's compute runtime and Mesa: the render nodes) and,
// for PoCL, strace of real workers (docs/sandbox.md).
var vendorNeeds = map[string]struct {
	devices, read, exec, syscalls []string
	sharedMemory                  bool
}{
	VendorPoCL: {
		// PoCL's OpenCL C headers; the CPU device's vendor id from the
		// host bridge.
		read: []string{"/usr/share/pocl", "/sys/bus/pci/devices/0000:00:00.0/vendor"},
		// PoCL 3.1 links every kernel into a shared object by running GNU
		// ld (through clang's driver) in a child process; PoCL 6 turns a
		// SPIR-V module into LLVM bitcode by running llvm-spirv (of its
		// LLVM's version) likewise (issue 45, docs/sandbox.md).
		exec: []string{"/usr/bin/ld", "/usr/bin/llvm-spirv-[0-9]*"},
	},
	VendorNVIDIA: {
		devices: []string{"/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
			"/dev/nvidia-caps/*"},
		// The driver's version and per-GPU state, its parameters (the
		// runtime checks the device nodes' mode there), and the GPUs' PCI
		// functions (NUMA node, resources) in sysfs.
		// (The GPUs' PCI functions are added by nvidiaPCI.)
		// The rest was found by vgpud -sandbox-diagnose on an H200
		// (driver 580.159.04, 2026-11-27): the device majors, the
		// lowest mappable address, the modules' state; its NUMA policy
		// (get_mempolicy); and shared anonymous mappings at fixed
		// addresses (mmap MAP_SHARED|MAP_FIXED|MAP_ANONYMOUS), without
		// which clCreateContext fails with CL_OUT_OF_HOST_MEMORY.
		read: []string{"/proc/driver/nvidia", "/proc/devices", "/proc/sys/vm/mmap_min_addr",
			"/sys/module/nvidia/version", "/sys/module/nvidia/initstate", "/sys/module/nvidia_uvm/initstate",
			"/sys/devices/system/memory/block_size_bytes"},
		syscalls:     []string{"get_mempolicy"},
		sharedMemory: true,
	},
	VendorAMD: {
		devices: []string{"/dev/kfd", "/dev/dri/renderD*"},
		read:    []string{"/sys/class/kfd", "/sys/devices/virtual/kfd", "/sys/class/drm/renderD*"},
	},
	VendorIntel: {
		devices: []string{"/dev/dri/renderD*"},
		read:    []string{"/sys/class/drm/renderD*", "/sys/dev/char"},
	},
	VendorMesa: {
		devices: []string{"/dev/dri/renderD*"},
		read:    []string{"/sys/class/drm/renderD*", "/sys/dev/char", "/usr/share/drirc.d", "/etc/drirc"},
	},
}

// Host is where FindPlatforms looks: a root directory (a fake tree in
// tests; "" or "/" for this host) and an environment (the ICD loader's and
// the dynamic loader's variables).
type Host struct {
	// Root prefixes every path read; the paths FindPlatforms returns are
	// the host's (without Root).
	Root string
	// Getenv reads the environment; nil: os.Getenv.
	Getenv func(string) string
}

func (h Host) path(p string) string {
	if h.Root == "" || h.Root == "/" {
		return p
	}
	return filepath.Join(h.Root, p)
}

func (h Host) getenv(k string) string {
	if h.Getenv == nil {
		return os.Getenv(k)
	}
	return h.Getenv(k)
}

// ErrNoPlatform: no vendor file or library names an OpenCL
// implementation on this host.
var ErrNoPlatform = errors.New("no OpenCL platform: no vendor file in the ICD loader's directory")

// DefaultVendorDir is the ICD loader's directory of vendor files.
const DefaultVendorDir = "/etc/OpenCL/vendors"

// FindPlatforms lists the OpenCL implementations the ICD loader would load
// on h, as the loader found there (libOpenCL.so.1) finds them: the
// libraries OCL_ICD_FILENAMES names (colon-separated; the Khronos loader
// and newer ocl-icd read it, Debian 12's ocl-icd 2.3.1 does not: seen on
// an NVIDIA machine whose image set it), else the vendor files of
// OCL_ICD_VENDORS (a directory, or one .icd file) or OPENCL_VENDOR_PATH
// (a directory) or /etc/OpenCL/vendors. Each vendor file holds one
// library name or path.
func FindPlatforms(h Host) ([]Platform, error) {
	ld := newLibSearch(h)
	var out []Platform
	if v := h.getenv("OCL_ICD_FILENAMES"); v != "" && ld.loaderReads("OCL_ICD_FILENAMES") {
		for lib := range strings.SplitSeq(v, ":") {
			if lib != "" {
				out = append(out, ld.platform("", lib))
			}
		}
		return out, nil
	}
	files, dir, err := vendorFiles(h)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(h.path(f))
		if err != nil {
			return nil, fmt.Errorf("vendor file %s: %w", f, err)
		}
		lib := strings.TrimSpace(string(b))
		if lib == "" || strings.ContainsAny(lib, "\n\x00") {
			return nil, fmt.Errorf("vendor file %s: want one library name, have %q", f, lib)
		}
		pl := ld.platform(f, lib)
		pl.VendorDir = dir
		out = append(out, pl)
	}
	if len(out) == 0 {
		return nil, ErrNoPlatform
	}
	return out, nil
}

// vendorFiles lists the vendor files the ICD loader reads, sorted, and
// the directory it lists ("" for one file).
func vendorFiles(h Host) ([]string, string, error) {
	dir := DefaultVendorDir
	if v := h.getenv("OCL_ICD_VENDORS"); v != "" {
		if strings.HasSuffix(v, ".icd") {
			return []string{v}, "", nil
		}
		dir = v
	} else if v := h.getenv("OPENCL_VENDOR_PATH"); v != "" {
		dir = v
	}
	ents, err := os.ReadDir(h.path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("%w (%s)", ErrNoPlatform, dir)
	}
	if err != nil {
		return nil, "", fmt.Errorf("vendor files: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".icd") && !e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, dir, nil
}

// systemLibDirs are the dynamic loader's default directories (x86-64
// Debian and others); the base policy reads them whole.
var systemLibDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// libSearch resolves library names as the dynamic loader does.
type libSearch struct {
	h        Host
	envPath  []string // LD_LIBRARY_PATH
	confPath []string // ld.so.conf, with its includes
}

func newLibSearch(h Host) *libSearch {
	s := &libSearch{h: h}
	for d := range strings.SplitSeq(h.getenv("LD_LIBRARY_PATH"), ":") {
		if d != "" {
			s.envPath = append(s.envPath, d)
		}
	}
	s.confPath = s.readConf("/etc/ld.so.conf", 0)
	return s
}

// readConf reads an ld.so.conf file: directories, one a line, and
// "include GLOB" lines.
func (s *libSearch) readConf(name string, depth int) []string {
	if depth > 8 {
		return nil
	}
	f, err := os.Open(s.h.path(name))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "include "):
			pat := strings.TrimSpace(strings.TrimPrefix(line, "include "))
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(name), pat)
			}
			matches, _ := filepath.Glob(s.h.path(pat))
			slices.Sort(matches)
			for _, m := range matches {
				out = append(out, s.readConf(s.unroot(m), depth+1)...)
			}
		case filepath.IsAbs(line):
			out = append(out, filepath.Clean(line))
		}
	}
	return out
}

// unroot turns a path under the host's root back into the host's name.
func (s *libSearch) unroot(p string) string {
	if s.h.Root == "" || s.h.Root == "/" {
		return p
	}
	rel, err := filepath.Rel(s.h.Root, p)
	if err != nil {
		return p
	}
	return "/" + rel
}

// platform resolves lib, the library a vendor file names, and its closure.
func (s *libSearch) platform(icd, lib string) Platform {
	pl := Platform{Vendor: vendorOf(lib), ICD: icd, Library: lib}
	pl.Libraries, pl.Missing = s.closure(lib)
	if len(pl.Libraries) > 0 {
		pl.Library = pl.Libraries[0]
	}
	for _, p := range pl.Libraries {
		d := filepath.Dir(p)
		if !slices.Contains(systemLibDirs, d) && !slices.Contains(pl.Dirs, d) {
			pl.Dirs = append(pl.Dirs, d)
		}
	}
	need := vendorNeeds[pl.Vendor]
	pl.Devices = s.glob(need.devices)
	pl.Read = s.glob(need.read)
	if pl.Vendor == VendorNVIDIA {
		pl.Read = append(pl.Read, s.nvidiaPCI()...)
	}
	pl.Exec = s.glob(need.exec)
	pl.Syscalls = need.syscalls
	pl.SharedMemory = need.sharedMemory
	return pl
}

// closure resolves name (a library name, or a path: a program or
// library) and every library it needs, transitively: the paths found,
// name's first, and the names not found.
func (s *libSearch) closure(name string) (libs, missing []string) {
	seen := map[string]bool{}
	var walk func(name, origin string, rpath, runpath []string)
	walk = func(name, origin string, rpath, runpath []string) {
		p, f := s.resolve(name, origin, rpath, runpath)
		if f == nil {
			if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			return
		}
		defer f.Close()
		if seen[p] {
			return
		}
		seen[p] = true
		libs = append(libs, p)
		needed, _ := f.ImportedLibraries()
		rp, _ := f.DynString(elf.DT_RPATH)
		rup, _ := f.DynString(elf.DT_RUNPATH)
		o := filepath.Dir(p)
		for _, n := range needed {
			walk(n, o, splitPaths(rp, o), splitPaths(rup, o))
		}
	}
	walk(name, "", nil, nil)
	return libs, missing
}

// ProgramLibraries lists the libraries program (a path on h) needs,
// transitively, that lie outside the system's library directories (the
// ICD loader from LD_LIBRARY_PATH, say): a worker, which is program run
// again inside its file view, needs them there.
func ProgramLibraries(h Host, program string) []string {
	s := newLibSearch(h)
	libs, _ := s.closure(program)
	var out []string
	for _, l := range libs {
		if l != program && !slices.Contains(systemLibDirs, filepath.Dir(l)) {
			out = append(out, l)
		}
	}
	return out
}

// loaderReads reports whether the ICD loader the dynamic loader finds
// (libOpenCL.so.1) reads the environment variable name: whether its file
// holds the name as a string. No loader found: false.
func (s *libSearch) loaderReads(name string) bool {
	p, f := s.resolve("libOpenCL.so.1", "", nil, nil)
	if f == nil {
		return false
	}
	f.Close()
	b, err := os.ReadFile(s.h.path(p))
	return err == nil && bytes.Contains(b, append([]byte(name), 0))
}

// splitPaths splits a DT_RPATH or DT_RUNPATH value, with $ORIGIN replaced
// by origin.
func splitPaths(vals []string, origin string) []string {
	var out []string
	for _, v := range vals {
		for d := range strings.SplitSeq(v, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			if d != "" {
				out = append(out, filepath.Clean(d))
			}
		}
	}
	return out
}

// resolve finds the library name as the dynamic loader would: a name with
// a slash is a path; otherwise DT_RPATH (when there is no DT_RUNPATH),
// LD_LIBRARY_PATH, DT_RUNPATH, ld.so.conf's directories, then the default
// ones. Only an x86-64 ELF shared object or program matches (a 32-bit one in a
// directory searched first is skipped, as the loader skips it). It returns
// the path and the open file, or nil.
func (s *libSearch) resolve(name, origin string, rpath, runpath []string) (string, *elf.File) {
	var cands []string
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) && origin != "" {
			p = filepath.Join(origin, p)
		}
		cands = []string{filepath.Clean(p)}
	} else {
		var dirs []string
		if len(runpath) == 0 {
			dirs = append(dirs, rpath...)
		}
		dirs = append(dirs, s.envPath...)
		dirs = append(dirs, runpath...)
		dirs = append(dirs, s.confPath...)
		dirs = append(dirs, systemLibDirs...)
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, name))
		}
	}
	for _, c := range cands {
		f, err := elf.Open(s.h.path(c))
		if err != nil {
			continue
		}
		if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_DYN && f.Type != elf.ET_EXEC {
			f.Close()
			continue
		}
		return c, f
	}
	return "", nil
}

// glob expands patterns on the host, in the host's names.
func (s *libSearch) glob(patterns []string) []string {
	var out []string
	for _, pat := range patterns {
		ms, _ := filepath.Glob(s.h.path(pat))
		slices.Sort(ms)
		for _, m := range ms {
			out = append(out, s.unroot(m))
		}
	}
	return out
}

// nvidiaPCI lists the sysfs PCI functions of the GPUs NVIDIA's driver
// drives, by the addresses it lists in /proc/driver/nvidia/gpus: each
// /sys/bus/pci/devices entry is a symbolic link, which the file view
// makes again with its target bound. Not the whole directory: its links
// would lead out of the view, and it names every device of the host.
func (s *libSearch) nvidiaPCI() []string {
	var out []string
	for _, gpu := range s.glob([]string{"/proc/driver/nvidia/gpus/*"}) {
		p := "/sys/bus/pci/devices/" + filepath.Base(gpu)
		if _, err := os.Lstat(s.h.path(p)); err == nil {
			out = append(out, p)
		}
	}
	return out
}
