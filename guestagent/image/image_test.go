package image

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/u-root/u-root/pkg/cpio"
)

// entry is what the tests compare of one archive record.
type entry struct {
	Mode         uint64
	Data         string
	Rmajor, Rmin uint64
}

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// readArchive reads a newc archive back with u-root's reader.
func readArchive(t *testing.T, b []byte) (map[string]entry, []string) {
	t.Helper()
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("ReadAllRecords = %v", err)
	}
	got := make(map[string]entry)
	var order []string
	for _, r := range recs {
		if r.Name == cpio.Trailer {
			continue
		}
		var data []byte
		if r.FileSize > 0 {
			data, err = io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
			if err != nil {
				t.Fatalf("read %s: %v", r.Name, err)
			}
		}
		if r.MTime != 0 || r.UID != 0 || r.GID != 0 {
			t.Errorf("%s: mtime %d uid %d gid %d, want 0 0 0", r.Name, r.MTime, r.UID, r.GID)
		}
		got[r.Name] = entry{Mode: r.Mode, Data: string(data), Rmajor: r.Rmajor, Rmin: r.Rminor}
		order = append(order, r.Name)
	}
	return got, order
}

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{
		Init:    writeFile(t, dir, "init", "INIT", 0o700),
		Modules: filepath.Join(dir, "mods"),
		Files: []File{
			{Src: writeFile(t, dir, "bench", "BENCH", 0o755), Dst: "/bin/vgpu-mmiobench"},
			{Src: writeFile(t, dir, "cfg", "CFG", 0o600), Dst: "/etc/vgpu/cfg", Mode: 0o644},
		},
	}
	writeFile(t, dir, "mods/virtio.ko", "KO1", 0o600)
	writeFile(t, dir, "mods/uio.ko", "KO2", 0o600)
	writeFile(t, dir, "mods/README", "not a module", 0o600)

	var buf bytes.Buffer
	if err := Build(&buf, spec); err != nil {
		t.Fatalf("Build = %v", err)
	}
	got, order := readArchive(t, buf.Bytes())

	const dir755 = cpio.S_IFDIR | 0o755
	want := map[string]entry{
		"bin":                   {Mode: dir755},
		"bin/vgpu-mmiobench":    {Mode: cpio.S_IFREG | 0o755, Data: "BENCH"},
		"dev":                   {Mode: dir755},
		"dev/console":           {Mode: cpio.S_IFCHR | 0o600, Rmajor: 5, Rmin: 1},
		"etc":                   {Mode: dir755},
		"etc/vgpu":              {Mode: dir755},
		"etc/vgpu/cfg":          {Mode: cpio.S_IFREG | 0o644, Data: "CFG"},
		"init":                  {Mode: cpio.S_IFREG | 0o755, Data: "INIT"},
		"lib":                   {Mode: dir755},
		"lib/modules":           {Mode: dir755},
		"lib/modules/uio.ko":    {Mode: cpio.S_IFREG | 0o644, Data: "KO2"},
		"lib/modules/virtio.ko": {Mode: cpio.S_IFREG | 0o644, Data: "KO1"},
		"proc":                  {Mode: cpio.S_IFDIR | 0o555},
		"sys":                   {Mode: cpio.S_IFDIR | 0o555},
		"tmp":                   {Mode: cpio.S_IFDIR | 0o1777},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Build(%+v) entries mismatch (-want +got):\n%s", spec, diff)
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("entry %d %q not after %q: archive not sorted", i, order[i], order[i-1])
		}
	}

	var again bytes.Buffer
	if err := Build(&again, spec); err != nil {
		t.Fatalf("second Build = %v", err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("Build(%+v) twice gave different bytes, want identical", spec)
	}
}

func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	initBin := writeFile(t, dir, "init", "INIT", 0o755)
	f := writeFile(t, dir, "f", "F", 0o644)
	tests := []struct {
		name string
		spec Spec
		want error // nil: any error
	}{
		{"no init", Spec{}, nil},
		{"missing init", Spec{Init: filepath.Join(dir, "absent")}, nil},
		{"relative dst", Spec{Init: initBin, Files: []File{{Src: f, Dst: "bin/f"}}}, ErrBadPath},
		{"unclean dst", Spec{Init: initBin, Files: []File{{Src: f, Dst: "/bin/../f"}}}, ErrBadPath},
		{"root dst", Spec{Init: initBin, Files: []File{{Src: f, Dst: "/"}}}, ErrBadPath},
		{"duplicate", Spec{Init: initBin, Files: []File{{Src: f, Dst: "/init"}}}, ErrBadPath},
		{"file over dir", Spec{Init: initBin, Files: []File{{Src: f, Dst: "/tmp"}}}, ErrBadPath},
		{"file over parent", Spec{Init: initBin, Files: []File{{Src: f, Dst: "/x"}, {Src: f, Dst: "/x/y"}}}, ErrBadPath},
		{"empty modules dir", Spec{Init: initBin, Modules: t.TempDir()}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Build(io.Discard, tt.spec)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("Build(%+v) = %v, want error %v", tt.spec, err, tt.want)
			}
		})
	}
}
