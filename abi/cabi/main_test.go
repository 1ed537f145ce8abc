package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const headerPath = "../../guestagent/icd/vgpu_abi.h"

// TestHeaderUpToDate regenerates vgpu_abi.h in memory: the checked-in file
// must be exactly what package abi defines today.
func TestHeaderUpToDate(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(headerPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("guestagent/icd/vgpu_abi.h is out of date with package abi (run go generate ./...); first difference at line %d:\n have %q\n want %q", i+1, g, w)
			}
		}
	}
}

// TestHeaderCompiles checks the generated C with a C11 compiler: the
// _Static_assert lines hold the structs to the offsets package abi encodes.
func TestHeaderCompiles(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed (scripts/install-deps.sh installs it)")
	}
	b, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := filepath.Join(dir, "vgpu_abi.h")
	if err := os.WriteFile(h, b, 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "t.c")
	prog := `#include "vgpu_abi.h"
#include <string.h>
int main(void)
{
	struct vgpu_command c = {.opcode = VGPU_OP_FENCE, .tag = 7};
	struct vgpu_cmd_fence f = {.addr = 4096, .value = 1};
	_Static_assert(sizeof f == sizeof c.payload, "payload size");
	memcpy(c.payload, &f, sizeof f);
	return vgpu_status_name(VGPU_STATUS_DEVICE_LOST) == NULL || vgpu_opcode_name(c.opcode) == NULL ||
	       vgpu_status_name(VGPU_NUM_STATUS) != NULL;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "t")
	out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", exe, src).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if out, err := exec.Command(exe).CombinedOutput(); err != nil {
		t.Fatalf("test program: %v\n%s", err, out)
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"RegID":             "REG_ID",
		"IDMagic":           "ID_MAGIC",
		"BAR0Size":          "BAR0_SIZE",
		"FeatureINTx":       "FEATURE_INTX",
		"SGEntrySize":       "SG_ENTRY_SIZE",
		"MaxSGEntries":      "MAX_SG_ENTRIES",
		"StatusOK":          "STATUS_OK",
		"SubsystemVendorID": "SUBSYSTEM_VENDOR_ID",
		"SrcSGAddr":         "SRC_SG_ADDR",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
