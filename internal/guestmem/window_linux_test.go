package guestmem

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
)

// sparse returns a sealed memfd of size bytes (a hole but for what
// tests pwrite into it).
func sparse(t *testing.T, size uint64) int {
	t.Helper()
	fd, err := NewSealed("guestmem-sparse", int64(size))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// A sealed, sparse 1 TiB memfd with two small windows announced: the
// address space taken stays near the windows, not the file, and only the
// windows are guest RAM.
func TestSparseFileMapsOnlyWindows(t *testing.T) {
	const (
		fileSize = 1 << 40
		lowSize  = 1 << 20
		lowOff   = 0x1800 // not page-aligned: vfio-user allows it
		highGPA  = 1 << 32
		highSize = 2 << 20
		highOff  = fileSize - highSize
	)
	fd := sparse(t, fileSize)
	low, high := []byte("low window"), []byte("high window, at the file's end")
	if _, err := unix.Pwrite(fd, low, lowOff); err != nil {
		t.Fatalf("Pwrite: %v", err)
	}
	if _, err := unix.Pwrite(fd, high, highOff+highSize-int64(len(high))); err != nil {
		t.Fatalf("Pwrite: %v", err)
	}
	m := &Map{}
	t.Cleanup(func() { m.Close() })
	before := addrspacetest.VMSize(t)
	err := m.Update([]Region{
		{GPA: 0, Size: lowSize, Offset: lowOff, FD: fd},
		{GPA: highGPA, Size: highSize, Offset: highOff, FD: dup(t, fd)},
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	// The windows are 3 MiB; the Go runtime may reserve a heap arena or
	// two meanwhile. Mapping the file would add a terabyte or two.
	if grew := int64(addrspacetest.VMSize(t) - before); grew > 1<<30 {
		t.Errorf("Update of %d MiB of windows of a %d GiB file grew VmSize by %d MiB, want well under 1 GiB",
			(lowSize+highSize)>>20, fileSize>>30, grew>>20)
	}

	got := make([]byte, len(low))
	if err := m.ReadAt(got, 0); err != nil || !bytes.Equal(got, low) {
		t.Errorf("ReadAt(%d, 0) = %q, %v, want %q", len(got), got, err, low)
	}
	got = make([]byte, len(high))
	gpa := uint64(highGPA + highSize - len(high))
	if err := m.ReadAt(got, gpa); err != nil || !bytes.Equal(got, high) {
		t.Errorf("ReadAt(%d, %#x) = %q, %v, want %q", len(got), gpa, got, err, high)
	}
	outside := []struct {
		name string
		gpa  uint64
		n    int
	}{
		{"after the low window", lowSize, 1},
		{"across the low window's end", lowSize - 4, 8},
		{"before the high window", highGPA - 1, 1},
		{"after the high window", highGPA + highSize, 8},
	}
	for _, tc := range outside {
		t.Run(tc.name, func(t *testing.T) {
			if err := m.ReadAt(make([]byte, tc.n), tc.gpa); !isBadAddress(err) {
				t.Errorf("ReadAt(%d, %#x) = %v, want a bad-address error", tc.n, tc.gpa, err)
			}
			if err := m.WriteAt(make([]byte, tc.n), tc.gpa); !isBadAddress(err) {
				t.Errorf("WriteAt(%d, %#x) = %v, want a bad-address error", tc.n, tc.gpa, err)
			}
		})
	}
}

// Mapped counts each region's window, rounded to pages, never the file.
func TestMappedIsWindows(t *testing.T) {
	fd := sparse(t, 1<<40)
	m := &Map{}
	t.Cleanup(func() { m.Close() })
	regions := []Region{
		{GPA: 0, Size: 0xa0000, Offset: 0, FD: fd},
		{GPA: 0x100000, Size: 0x300000, Offset: 0x100000, FD: dup(t, fd)},
		{GPA: 1 << 32, Size: 0x1000, Offset: 0x800, FD: dup(t, fd)},
	}
	if err := m.Update(regions); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got, want := m.Mapped(), uint64(0xa0000+0x300000+0x2000); got != want {
		t.Errorf("Mapped() = %#x, want %#x", got, want)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := m.Mapped(); got != 0 {
		t.Errorf("Mapped() after Close = %#x, want 0", got)
	}
}

// A peer announcing more guest RAM than the host has gets ErrTooLarge,
// from Check (the main process) and from Update (the worker), and the
// earlier map stays.
func TestHugeAnnouncementRefused(t *testing.T) {
	const huge = 8 << 40
	if Limit() >= huge {
		t.Skipf("this host has %d GiB of RAM and swap: 8 TiB is not too large", Limit()>>30)
	}
	m, local := pcLayout(t)
	fd := sparse(t, huge)
	t.Cleanup(func() { unix.Close(fd) })
	tests := []struct {
		name    string
		regions []Region
	}{
		{"one region", []Region{{GPA: 0, Size: huge, FD: fd}}},
		{"regions adding up", []Region{
			{GPA: 0, Size: huge / 2, FD: fd},
			{GPA: huge, Size: huge / 2, Offset: huge / 2, FD: fd},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Check(tc.regions); !errors.Is(err, ErrTooLarge) || !isBadAddress(err) {
				t.Errorf("Check(%d TiB) = %v, want ErrTooLarge", huge>>40, err)
			}
			regions := append([]Region(nil), tc.regions...)
			for i := range regions {
				regions[i].FD = dup(t, fd)
			}
			before := addrspacetest.VMSize(t)
			if err := m.Update(regions); !errors.Is(err, ErrTooLarge) {
				t.Errorf("Update(%d TiB) = %v, want ErrTooLarge", huge>>40, err)
			}
			if grew := int64(addrspacetest.VMSize(t) - before); grew > 1<<30 {
				t.Errorf("refused Update grew VmSize by %d MiB", grew>>20)
			}
			got := make([]byte, 16)
			if err := m.ReadAt(got, 0); err != nil || !bytes.Equal(got, local[:16]) {
				t.Errorf("ReadAt(16, 0) after the refusal = %x, %v, want the old map's %x", got, err, local[:16])
			}
		})
	}
}
