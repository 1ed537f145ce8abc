package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const protoHeaderPath = "../../guestagent/icd/vgpu_icdproto.h"

// TestProtoHeaderUpToDate regenerates vgpu_icdproto.h in memory: the
// checked-in file must be exactly what package icdproto defines today.
func TestProtoHeaderUpToDate(t *testing.T) {
	want, err := GenerateProto()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(protoHeaderPath)
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
				t.Fatalf("guestagent/icd/vgpu_icdproto.h is out of date with package icdproto (run go generate ./guestagent/icdproto); first difference at line %d:\n have %q\n want %q", i+1, g, w)
			}
		}
	}
}

// TestProtoHeaderCompiles checks the generated C with a C11 compiler, next
// to vgpu_abi.h as the ICD includes them, and runs a program that encodes
// a launch head and reads names back.
func TestProtoHeaderCompiles(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed (scripts/install-deps.sh installs it)")
	}
	b, err := GenerateProto()
	if err != nil {
		t.Fatal(err)
	}
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range map[string][]byte{"vgpu_icdproto.h": b, "vgpu_abi.h": a} {
		if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(dir, "t.c")
	prog := `#include "vgpu_abi.h"
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
