package driver

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// TestRestoreConfig: a function whose configuration space came back from
// reset (BARs and command zero, as QEMU 11.1's vfio-user-pci has it after a
// migration) gets the kernel's addresses and its decoders back; one that
// holds them is not written. A configuration saved before (SaveConfig,
// what the agent does at an in-place Quiesce) restores the same, without
// reading the resources again.
func TestRestoreConfig(t *testing.T) {
	// resource lines: start, end, flags. BAR0 32-bit memory, BAR1 I/O,
	// BAR2-3 one 64-bit prefetchable memory BAR, the rest unused.
	const resource = "0x00000000fe000000 0x00000000fe000fff 0x0000000000040200\n" +
		"0x000000000000c000 0x000000000000c03f 0x0000000000040101\n" +
		"0x0000008000000000 0x00000080000fffff 0x000000000014220c\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n" +
		"0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
	reset := make([]byte, 256)
	binary.LittleEndian.PutUint32(reset[0x10:], 0x0)   // memory, 32-bit
	binary.LittleEndian.PutUint32(reset[0x14:], 0x1)   // I/O
	binary.LittleEndian.PutUint32(reset[0x18:], 0xc)   // memory, 64-bit, prefetchable
	binary.LittleEndian.PutUint16(reset[0x04:], 1<<10) // INTx disabled, decoders off
	reset[0x3c] = 11                                   // interrupt line, kept
	want := bytes.Clone(reset)
	binary.LittleEndian.PutUint32(want[0x10:], 0xfe000000)
	binary.LittleEndian.PutUint32(want[0x14:], 0xc001)
	binary.LittleEndian.PutUint32(want[0x18:], 0x0000000c)
	binary.LittleEndian.PutUint32(want[0x1c:], 0x80)
	binary.LittleEndian.PutUint16(want[0x04:], 1<<10|cmdIO|cmdMemory|cmdBusMaster)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "resource"), []byte(resource), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, reset, 0o644); err != nil {
		t.Fatal(err)
	}
	did, err := RestoreConfig(dir)
	if err != nil || !did {
		t.Fatalf("RestoreConfig(reset device) = %v, %v, want true, nil", did, err)
	}
	got, _ := os.ReadFile(cfg)
	if !bytes.Equal(got, want) {
		t.Errorf("config after RestoreConfig:\n got % x\nwant % x", got[:0x40], want[:0x40])
	}
	// A second call finds the addresses there and writes nothing.
	st, _ := os.Stat(cfg)
	if did, err := RestoreConfig(dir); err != nil || did {
		t.Errorf("RestoreConfig(restored device) = %v, %v, want false, nil", did, err)
	}
	if st2, _ := os.Stat(cfg); !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("a device that holds its BARs was written")
	}

	saved, err := SaveConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "resource")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, reset, 0o644); err != nil {
		t.Fatal(err)
	}
	if did, err := saved.Restore(); err != nil || !did {
		t.Fatalf("saved Restore(reset device) = %v, %v, want true, nil", did, err)
	}
	if got, _ := os.ReadFile(cfg); !bytes.Equal(got, want) {
		t.Errorf("config after saved Restore:\n got % x\nwant % x", got[:0x40], want[:0x40])
	}
}

func TestParseResource(t *testing.T) {
	for _, c := range []struct {
		line         string
		start, flags uint64
		ok           bool
	}{
		{"0x00000000fe000000 0x00000000fe000fff 0x0000000000040200", 0xfe000000, 0x40200, true},
		{"0x0 0x0 0x0", 0, 0, true},
		{"0xfe000000 0xfe000fff", 0, 0, false},
		{"0xfe000000 0xfe000fff 0x200 0x1", 0, 0, false},
		{"0xzz 0x0 0x0", 0, 0, false},
		{"", 0, 0, false},
	} {
		start, flags, ok := parseResource(c.line)
		if start != c.start || flags != c.flags || ok != c.ok {
			t.Errorf("parseResource(%q) = %#x, %#x, %v; want %#x, %#x, %v", c.line, start, flags, ok, c.start, c.flags, c.ok)
		}
	}
}

// TestRestoreReadsOnlyItsWords: a saved configuration's Restore reads the
// words it may write back and the command register, not the whole header:
// each access traps to the VMM in a guest running cold after a migration.
// The configuration space here ends right after the last BAR word, so a
// read of anything past it fails.
func TestRestoreReadsOnlyItsWords(t *testing.T) {
	const resource = "0x0000008000000000 0x00000080000fffff 0x000000000014220c\n"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "resource"), []byte(resource), 0o644); err != nil {
		t.Fatal(err)
	}
	reset := make([]byte, 0x18) // up to BAR1, the 64-bit BAR0's high word
	binary.LittleEndian.PutUint32(reset[0x10:], 0xc)
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, reset, 0o644); err != nil {
		t.Fatal(err)
	}
	saved, err := SaveConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if did, err := saved.Restore(); err != nil || !did {
		t.Fatalf("Restore() = %v, %v, want true, nil", did, err)
	}
	want := make([]byte, 0x18)
	binary.LittleEndian.PutUint32(want[0x10:], 0xc)
	binary.LittleEndian.PutUint32(want[0x14:], 0x80)
	binary.LittleEndian.PutUint16(want[0x04:], cmdMemory|cmdBusMaster)
	if got, _ := os.ReadFile(cfg); !bytes.Equal(got, want) {
		t.Errorf("config after Restore:\n got % x\nwant % x", got, want)
	}
}

// TestRestoreWalksNoPath: Restore writes through the configuration space
// SaveConfig opened, so after a migration it walks no sysfs path (the
// file is moved away here: a Restore that opened it by name would fail);
// a second Restore opens it by name again, and Close releases a saved
// configuration that is not restored.
func TestRestoreWalksNoPath(t *testing.T) {
	const resource = "0x00000000fe000000 0x00000000fe000fff 0x0000000000040200\n"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "resource"), []byte(resource), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, make([]byte, 0x40), 0o644); err != nil {
		t.Fatal(err)
	}
	saved, err := SaveConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "config")
	if err := os.Rename(cfg, moved); err != nil {
		t.Fatal(err)
	}
	if did, err := saved.Restore(); err != nil || !did {
		t.Fatalf("Restore() = %v, %v, want true, nil (through the file SaveConfig opened)", did, err)
	}
	if got, _ := os.ReadFile(moved); binary.LittleEndian.Uint32(got[0x10:]) != 0xfe000000 {
		t.Errorf("BAR0 %#x after Restore, want 0xfe000000", binary.LittleEndian.Uint32(got[0x10:]))
	}
	if _, err := saved.Restore(); err == nil {
		t.Errorf("a second Restore with the configuration gone succeeded: it did not open it by name")
	}

	other, err := SaveConfig(t.TempDir())
	if err == nil {
		t.Errorf("SaveConfig of a directory without resources = %v, want an error", other)
	}
	if err := os.Rename(moved, cfg); err != nil {
		t.Fatal(err)
	}
	unused, err := SaveConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := unused.Close(); err != nil || unused.Close() != nil {
		t.Errorf("Close of a saved configuration: %v, want nil (twice)", err)
	}
}
