package gpu

import (
	"errors"
	"testing"
)

var acceptedSources = []string{
	"__kernel void f(__global int *a) { a[0] = 1; }",
	"#define N 4\n#ifdef N\n#endif\n__kernel void f(void) {}",
	"#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n",
	"#pragma unroll 4\n#pragma clang loop unroll(enable)\n",
	"#define S(x) #x\n__constant char s[] = S(include);",
	"// #include \"/etc/passwd\"\n/* #include <x>\n */\n",
	"__constant char s[] = \"#include <x>\";",
	"#\n#  \t define X 1\n",
	"#error don't\n#define Y 2\n",
	"//##### banner #####\n",
	"int a = 1; # include",
	// Token pasting (ABI 1.4), even of what may not be written out: a
	// directive cannot come of it (docs/ABI.md).
	"#define CONCAT(a, b) a##b\n__kernel void CONCAT(f, 1)(void) {}",
	"#define P(a,b) a##b\nP(_Pra,gma)",
	"#define P(a,b) a%:%:b",
	"int x = 'a ## b';",
}

var rejectedSources = []string{
	"#include \"/etc/passwd\"",
	"  #  include <x>",
	"%:include <x>",
	"??=include <x>",
	"#/* c */include <x>",
	"/* c */ #include <x>",
	"/* multi\nline */ #include <x>",
	"#inc\\\nlude <x>",
	"#\\ \ninclude <x>",
	"# \\\r\ninclude <x>",
	"x;\r#include <x>",
	"// comment ??/\n#include <x>",
	"#include_next <x>",
	"#import <x>",
	"#embed <x>",
	"# 1 \"/etc/passwd\"",
	"#line 1 \"/etc/passwd\"",
	"#if __has_include(\"/etc/shadow\")\n#endif",
	"#pragma clang __debug llvm_fatal_error",
	"#pragma /**/ clang __debug crash",
	"#pragma GCC dependency \"/etc/passwd\"",
	"#pragma clang module import x",
	"_Pragma(\"clang __debug crash\")",
	"__constant char s[] = \"__debug\";",
	"int incl\\u0075de;",
	"__kernel void f(void) {}\x00#include <x>",
}

func TestCheckSource(t *testing.T) {
	for _, src := range acceptedSources {
		if err := CheckSource(src, ""); err != nil {
			t.Errorf("CheckSource(%q) = %v, want nil", src, err)
		}
	}
	for _, src := range rejectedSources {
		err := CheckSource(src, "")
		if !errors.Is(err, ErrSourceRejected) || !errors.Is(err, ErrBuildFailed) {
			t.Errorf("CheckSource(%q) = %v, want ErrSourceRejected with StatusBuildFailed", src, err)
		}
	}
}

func TestCheckOptions(t *testing.T) {
	for _, opts := range []string{
		"", "-DN=4", "-D N", "-D N=1 -U M", "-cl-fast-relaxed-math -cl-mad-enable", "-cl-std=CL1.2", "-w -Werror", "\t-DX\n",
	} {
		if err := CheckSource("", opts); err != nil {
			t.Errorf("CheckSource(options %q) = %v, want nil", opts, err)
		}
	}
	for _, opts := range []string{
		"-I/etc", "-I /etc", "-include /etc/passwd", "-Xclang -load", "-D", "-D -I/etc", "-D1X", "-DX\"a\"",
		"-cl-std=CLC++", "-x c", "/etc/passwd", "-DX\x00", "-DX\x85", "-DX\\",
	} {
		if err := CheckSource("", opts); !errors.Is(err, ErrSourceRejected) {
			t.Errorf("CheckSource(options %q) = %v, want ErrSourceRejected", opts, err)
		}
	}
}

func FuzzCheckSource(f *testing.F) {
	for _, s := range append(acceptedSources, rejectedSources...) {
		f.Add(s, "")
	}
	f.Add("", "-DX=1 -cl-std=CL1.2")
	f.Fuzz(func(t *testing.T, src, opts string) {
		err := CheckSource(src, opts)
		if err != nil && (!errors.Is(err, ErrSourceRejected)) {
			t.Fatalf("CheckSource(%q, %q) = %v, want nil or ErrSourceRejected", src, opts, err)
		}
		if err == nil {
			// An accepted source followed by an include on a line of its
			// own is rejected unless a comment is still open.
			if err := CheckSource(src+"\n*/\n#include <x>\n", opts); err == nil {
				t.Fatalf("CheckSource(%q + include) = nil, want rejection", src)
			}
		}
	})
}
