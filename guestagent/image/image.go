package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Archive paths the guest's init relies on.
const (
	InitPath    = "/init"
	BinDir      = "/bin"
	ModulesDir  = "/lib/modules"
	ConsolePath = "/dev/console"
)

// Console device numbers (Documentation/admin-guide/devices.txt: 5,1 is the
// system console).
const (
	consoleMajor = 5
	consoleMinor = 1
)

// ErrBadPath reports an archive path that is not absolute, not clean, or
// clashes with another entry.
var ErrBadPath = errors.New("bad archive path")

// File is one host file placed in the archive.
type File struct {
	// Src is the host path to read.
	Src string
	// Dst is the absolute archive path, e.g. "/bin/vgpu-mmiobench".
	Dst string
	// Mode holds the permission bits; zero takes the source file's.
	Mode fs.FileMode
}

// Spec is what goes into an initramfs.
type Spec struct {
	// Init is the host path of the static init binary, placed at /init.
	Init string
	// Modules is a host directory whose *.ko files go to /lib/modules.
	// Empty means no modules.
	Modules string
	// Files are further files, typically programs under /bin.
	Files []File
}

// Build writes the initramfs described by spec to w as a newc cpio archive.
func Build(w io.Writer, spec Spec) error {
	if spec.Init == "" {
		return errors.New("build initramfs: no init binary")
	}
	files := []File{{Src: spec.Init, Dst: InitPath, Mode: 0o755}}
	if spec.Modules != "" {
		kos, err := filepath.Glob(filepath.Join(spec.Modules, "*.ko"))
		if err != nil {
			return fmt.Errorf("build initramfs: list modules: %w", err)
		}
		if len(kos) == 0 {
			return fmt.Errorf("build initramfs: no *.ko in %s", spec.Modules)
		}
		for _, ko := range kos {
			files = append(files, File{Src: ko, Dst: path.Join(ModulesDir, filepath.Base(ko)), Mode: 0o644})
		}
	}
	files = append(files, spec.Files...)

	recs, err := records(files)
	if err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	rw := cpio.Newc.Writer(w)
	for _, r := range recs {
		if err := rw.WriteRecord(r); err != nil {
			return fmt.Errorf("build initramfs: write %s: %w", r.Name, err)
		}
	}
	if err := cpio.WriteTrailer(rw); err != nil {
		return fmt.Errorf("build initramfs: write trailer: %w", err)
	}
	return nil
}

// records returns the sorted archive records for files plus the fixed
// directories and device nodes.
func records(files []File) ([]cpio.Record, error) {
	byName := make(map[string]cpio.Record)
	dirs := map[string]uint64{
		"dev": 0o755, "proc": 0o555, "sys": 0o555, "tmp": 0o1777,
		"bin": 0o755, "lib": 0o755, "lib/modules": 0o755,
	}
	for _, f := range files {
		name, err := archiveName(f.Dst)
		if err != nil {
			return nil, err
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("%w: %s placed twice", ErrBadPath, f.Dst)
		}
		rec, err := fileRecord(f, name)
		if err != nil {
			return nil, err
		}
		byName[name] = rec
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	console := cpio.CharDev("dev/console", 0o600, consoleMajor, consoleMinor)
	console.NLink = 1
	byName[console.Name] = console
	for d, mode := range dirs {
		if _, clash := byName[d]; clash {
			return nil, fmt.Errorf("%w: %s is a file and a directory", ErrBadPath, "/"+d)
		}
		rec := cpio.Directory(d, mode)
		rec.NLink = 2
		byName[d] = rec
	}

	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	// A parent sorts before everything under it, so directories come
	// before their contents.
	slices.Sort(names)
	recs := make([]cpio.Record, 0, len(names))
	for i, n := range names {
		r := byName[n]
		r.Ino = uint64(i + 1)
		r.MTime = 0
		r.UID, r.GID = 0, 0
		recs = append(recs, r)
	}
	return recs, nil
}

// archiveName checks an absolute, clean archive path and returns it without
// the leading slash, as cpio stores it.
func archiveName(dst string) (string, error) {
	if !strings.HasPrefix(dst, "/") || path.Clean(dst) != dst || dst == "/" {
		return "", fmt.Errorf("%w: %q (want an absolute, clean path)", ErrBadPath, dst)
	}
	return strings.TrimPrefix(dst, "/"), nil
}

func fileRecord(f File, name string) (cpio.Record, error) {
	data, err := os.ReadFile(f.Src)
	if err != nil {
		return cpio.Record{}, fmt.Errorf("read %s: %w", f.Src, err)
	}
	mode := f.Mode.Perm()
	if mode == 0 {
		st, err := os.Stat(f.Src)
		if err != nil {
			return cpio.Record{}, fmt.Errorf("stat %s: %w", f.Src, err)
		}
		mode = st.Mode().Perm()
	}
	return cpio.StaticRecord(data, cpio.Info{
		Name:  name,
		Mode:  cpio.S_IFREG | uint64(mode),
		NLink: 1,
	}), nil
}
