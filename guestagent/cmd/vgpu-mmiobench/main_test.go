package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/abi"
)

// fakeDevice creates a PCI device directory under sysfs whose resource0 is
// a regular file holding a BAR with id at offset idOff.
func fakeDevice(t *testing.T, sysfs, bdf, vendor, device string, idOff, id uint32) string {
	t.Helper()
	dir := filepath.Join(sysfs, "bus/pci/devices", bdf)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bar := make([]byte, 4096)
	binary.LittleEndian.PutUint32(bar[idOff:], id)
	for name, data := range map[string][]byte{
		"vendor": []byte(vendor + "\n"), "device": []byte(device + "\n"),
		"enable": []byte("0\n"), "resource0": bar,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunFakeSysfs(t *testing.T) {
	sysfs := t.TempDir()
	fakeDevice(t, sysfs, "0000:00:02.0", "0x8086", "0x1237", 0, 0)
	edu := fakeDevice(t, sysfs, "0000:00:03.0", "0x1234", "0x11e8", 0, 0x010000ed)
	vgpu := fakeDevice(t, sysfs, "0000:00:04.0", "0x7667", "0x0001", abi.RegID, abi.IDMagic)

	tests := []struct {
		dev, dir, bdf string
		writeOff      uint32
	}{
		{"1234:11e8", edu, "0000:00:03.0", 0x04},
		{"7667:0001", vgpu, "0000:00:04.0", abi.RegErrorAck},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		args := []string{"-dev", tt.dev, "-n", "10", "-sysfs", sysfs}
		if err := run(context.Background(), args, &out); err != nil {
			t.Fatalf("run(%q) = %v, want nil", args, err)
		}
		var ops []string
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			js, ok := strings.CutPrefix(sc.Text(), Marker)
			if !ok {
				t.Fatalf("run(%q) printed %q, want lines starting %q", args, sc.Text(), Marker)
			}
			var r Result
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("decode %q: %v", js, err)
			}
			if r.Device != tt.dev || r.BDF != tt.bdf || r.N != 10 || r.TotalNS <= 0 {
				t.Errorf("run(%q) result %+v, want device %s bdf %s n 10 total_ns > 0", args, r, tt.dev, tt.bdf)
			}
			ops = append(ops, r.Op)
		}
		if got := strings.Join(ops, ","); got != "write,read" {
			t.Errorf("run(%q) ops = %s, want write,read", args, got)
		}
		bar, err := os.ReadFile(filepath.Join(tt.dir, "resource0"))
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(bar[tt.writeOff:]); got != 9 {
			t.Errorf("run(%q): register %#x = %d after the writes, want 9 (the last value written)", args, tt.writeOff, got)
		}
		if en, _ := os.ReadFile(filepath.Join(tt.dir, "enable")); string(en[:1]) != "1" {
			t.Errorf("run(%q): enable = %q, want 1", args, en)
		}
	}
}

func TestRunErrors(t *testing.T) {
	sysfs := t.TempDir()
	fakeDevice(t, sysfs, "0000:00:03.0", "0x1234", "0x11e8", 0, 0xdeadbeef)
	for _, args := range [][]string{
		{},
		{"-dev", "1234"},
		{"-dev", "xyz:11e8"},
		{"-dev", "1234:11e8", "-n", "0"},
		{"-dev", "8086:1237", "-sysfs", sysfs}, // no harmless register known
		{"-dev", "7667:0001", "-sysfs", sysfs}, // absent
		{"-dev", "1234:11e8", "-sysfs", sysfs}, // wrong identification
		{"-dev", "1234:11e8", "extra"},
	} {
		if err := run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) = nil, want error", args)
		}
	}
}

// TestRunSeveralDevices times two devices in one run, in flag order.
func TestRunSeveralDevices(t *testing.T) {
	sysfs := t.TempDir()
	fakeDevice(t, sysfs, "0000:00:03.0", "0x1234", "0x11e8", 0, 0x010000ed)
	fakeDevice(t, sysfs, "0000:00:04.0", "0x7667", "0x0001", abi.RegID, abi.IDMagic)
	args := []string{"-dev", "7667:0001", "-dev", "1234:11e8", "-n", "5", "-sysfs", sysfs}
	var out bytes.Buffer
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run(%q) = %v, want nil", args, err)
	}
	var got []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r Result
		if err := json.Unmarshal([]byte(strings.TrimPrefix(sc.Text(), Marker)), &r); err != nil {
			t.Fatalf("decode %q: %v", sc.Text(), err)
		}
		got = append(got, r.Device+"/"+r.Op)
	}
	want := "7667:0001/write,7667:0001/read,1234:11e8/write,1234:11e8/read"
	if s := strings.Join(got, ","); s != want {
		t.Errorf("run(%q) lines = %s, want %s", args, s, want)
	}
	// An unknown device anywhere in the list fails before any timing.
	out.Reset()
	bad := []string{"-dev", "1234:11e8", "-dev", "8086:1237", "-sysfs", sysfs}
	if err := run(context.Background(), bad, &out); err == nil || out.Len() != 0 {
		t.Errorf("run(%q) = %v with %d bytes printed, want an error and no output", bad, err, out.Len())
	}
}
