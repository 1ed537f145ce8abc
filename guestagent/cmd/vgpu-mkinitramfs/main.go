// Command vgpu-mkinitramfs writes the initramfs of the vgpud test guest
// (docs/guest-image.md):
//
//	vgpu-mkinitramfs -o out.cpio -init vgpu-init -modules build/guest/modules \
//		-bin vgpu-mmiobench=build/guest/bin/vgpu-mmiobench
//
// Each -bin NAME=PATH places the host file PATH at /bin/NAME, mode 0755;
// each -file DST=SRC places SRC at the absolute path DST with SRC's mode
// (the guest ICD at /lib/vgpud/libvgpud-icd.so, docs/icd.md).
// The archive is written to a temporary file and renamed over -o.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
	"github.com/vgpud/vgpud/guestagent/image"
)

func main() {
	cmdmain.Main("vgpu-mkinitramfs", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stderr) }, os.Interrupt)
}

// binFlags collects repeated -bin NAME=PATH flags.
type binFlags []image.File

func (b *binFlags) String() string { return fmt.Sprint(*b) }

func (b *binFlags) Set(v string) error {
	name, p, ok := strings.Cut(v, "=")
	if !ok || name == "" || p == "" || strings.Contains(name, "/") {
		return fmt.Errorf("want NAME=PATH with a plain NAME, got %q", v)
	}
	*b = append(*b, image.File{Src: p, Dst: image.BinDir + "/" + name, Mode: 0o755})
	return nil
}

// fileFlags collects -file DST=SRC: any file at an absolute path of the
// archive (e.g. a shared library under /lib), mode taken from SRC.
type fileFlags []image.File

func (f *fileFlags) String() string { return fmt.Sprint(len(*f), " files") }

func (f *fileFlags) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || !path.IsAbs(dst) || path.Clean(dst) != dst || src == "" {
		return fmt.Errorf("want DST=SRC with a clean absolute DST, got %q", v)
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	*f = append(*f, image.File{Src: src, Dst: dst, Mode: st.Mode().Perm()})
	return nil
}

func run(_ context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vgpu-mkinitramfs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "output cpio `file`")
	initBin := fs.String("init", "", "static init `binary`, placed at /init")
	modules := fs.String("modules", "", "`dir`ectory whose *.ko go to /lib/modules")
	var bins binFlags
	fs.Var(&bins, "bin", "`NAME=PATH`: place PATH at /bin/NAME (repeatable)")
	var files fileFlags
	fs.Var(&files, "file", "`DST=SRC`: place SRC at the absolute path DST, with SRC's mode (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *initBin == "" || fs.NArg() != 0 {
		fs.Usage()
		return errors.New("need -o and -init, and no positional arguments")
	}
	spec := image.Spec{Init: *initBin, Modules: *modules, Files: append(bins, files...)}

	tmp, err := os.CreateTemp(filepath.Dir(*out), ".initramfs-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := image.Build(tmp, spec); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return fmt.Errorf("install %s: %w", *out, err)
	}
	return nil
}
