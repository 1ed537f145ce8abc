package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// headers are the generated C headers: where each is checked in, what
// generates it, the command that regenerates it, and a C program that uses
// it (compiled next to all of them, as the ICD includes them).
var headers = []struct {
	name, path, regen string
	generate          func() ([]byte, error)
	prog              string
}{
	{
		name: "vgpu_abi.h", path: "../../guestagent/icd/vgpu_abi.h", regen: "package abi (run go generate ./...)",
		generate: Generate,
		// The _Static_assert lines hold the structs to the offsets
		// package abi encodes.
		prog: `#include "vgpu_abi.h"
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
`,
	},
	{
		name: "vgpu_icdproto.h", path: "../../guestagent/icd/vgpu_icdproto.h",
		regen:    "package icdproto (run go generate ./guestagent/icdproto)",
		generate: GenerateProto,
		// Encodes a launch head and reads names back.
		prog: `#include "vgpu_abi.h"
#include "vgpu_icdproto.h"
#include <string.h>
int main(void)
{
	struct vgpu_icdp_header h = {.op = VGPU_ICDP_OP_LAUNCH, .len = VGPU_ICDP_HEADER_SIZE + VGPU_ICDP_LAUNCH_HEAD_SIZE};
	struct vgpu_icdp_launch_head l = {.program = 1, .work_dim = 1, .global_size = {64}, .event = 9};
	struct vgpu_icdp_launch_arg a = {.kind = VGPU_ARG_BUFFER, .value = 3};
	unsigned char msg[VGPU_ICDP_MAX_MESSAGE];
	_Static_assert(sizeof h == VGPU_ICDP_HEADER_SIZE, "header size");
	_Static_assert(sizeof l == VGPU_ICDP_LAUNCH_HEAD_SIZE, "launch head size");
	_Static_assert(sizeof(struct vgpu_icdp_device_record) == VGPU_ICDP_DEVICE_RECORD_SIZE, "device record size");
	_Static_assert(sizeof(struct vgpu_icdp_event_record) == VGPU_ICDP_EVENT_RECORD_SIZE, "event record size");
	memcpy(l.kernel, "k", 2);
	memcpy(msg, &h, sizeof h);
	memcpy(msg + sizeof h, &l, sizeof l);
	memcpy(msg + sizeof h + sizeof l, &a, sizeof a);
	return strcmp(vgpu_icdp_op_name(msg[0]), "launch") != 0 || vgpu_icdp_op_name(VGPU_ICDP_OP_BUILD | VGPU_ICDP_REPLY_BIT) == NULL ||
	       vgpu_icdp_error_name(VGPU_ICDP_NUM_ERR_CODES) != NULL || strlen(VGPU_ICDP_DEFAULT_SOCKET) == 0 ||
	       VGPU_ICDP_NOT_COMPLETE != 0xFFFFFFFFu;
}
`,
	},
}

// TestHeadersUpToDate regenerates each header in memory: the checked-in
// file must be exactly what the Go package defines today.
func TestHeadersUpToDate(t *testing.T) {
	for _, h := range headers {
		t.Run(h.name, func(t *testing.T) {
			want, err := h.generate()
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(h.path)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(got, want) {
				return
			}
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
					t.Fatalf("%s is out of date with %s; first difference at line %d:\n have %q\n want %q",
						strings.TrimPrefix(h.path, "../../"), h.regen, i+1, g, w)
				}
			}
		})
	}
}

// TestHeadersCompile checks the generated C with a C11 compiler, pedantic,
// and runs each header's program.
func TestHeadersCompile(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	for _, h := range headers {
		b, err := h.generate()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, h.name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range headers {
		t.Run(h.name, func(t *testing.T) {
			src := filepath.Join(dir, strings.TrimSuffix(h.name, ".h")+"_test.c")
			if err := os.WriteFile(src, []byte(h.prog), 0o644); err != nil {
				t.Fatal(err)
			}
			exe := strings.TrimSuffix(src, ".c")
			out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", exe, src).CombinedOutput()
			if err != nil {
				t.Fatalf("gcc: %v\n%s", err, out)
			}
			if out, err := exec.Command(exe).CombinedOutput(); err != nil {
				t.Fatalf("test program: %v\n%s", err, out)
			}
		})
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
