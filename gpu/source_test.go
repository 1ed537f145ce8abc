package gpu

import (
	"errors"
	"strings"
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
	// #line with a number only (ABI 1.7).
	"#undef X\n#line 1\n__kernel void f(void) {}",
	"#line /* c */ 42 // c\n",
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
	"#define F 1 \"/etc/passwd\"\n#line F",
	"#line 0x10",
	"#line 1 2",
	"#line\\\n 1 \"/etc/passwd\"",
	"#if __has_include(\"/etc/shadow\")\n#endif",
	"#pragma clang __debug llvm_fatal_error",
	"#pragma /**/ clang __debug crash",
	"#pragma GCC dependency \"/etc/passwd\"",
	"#pragma clang module import x",
	"_Pragma(\"clang __debug crash\")",
	"__constant char s[] = \"__debug\";",
	"int incl\\u0075de;",
	"__kernel void f(void) {}\x00#include <x>",
	// With trigraphs (clang's OpenCL C) ??' is ^, no quote: the /* after
	// it opens no comment, and the #include is a directive (issue 40: PoCL
	// 3.1 read /etc/passwd for both).
	"??' ' /*\n#include \"/etc/passwd\"\n*/",
	"#define E ??' ' /*\n#include \"/etc/passwd\"\n// */\n__kernel void k(void) {}",
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
	for _, tt := range asmReached {
		f.Add(tt.src, tt.opts)
	}
	for _, tt := range asmNotReached {
		f.Add(tt.src, tt.opts)
	}
	f.Add(random123Shape, "")
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
		// Inline assembly on a line of its own after any source (and a
		// closed comment; the blank line first, so that a splice at the
		// source's end cannot join the */ to a / before it) is compiled,
		// or the source's conditionals are unbalanced: refused on the
		// host's CPU whatever the compiler predefines.
		asm := src + "\n\n*/\n__asm__(\"syscall\");\n"
		for _, target := range []SourceTarget{{}, {Predefined: everyName}, {Predefined: oracle(nil)}} {
			if err := CheckSourceFor(asm, opts, target); !errors.Is(err, ErrSourceRejected) {
				t.Fatalf("CheckSourceFor(%q + asm, %q) = %v, want ErrSourceRejected", src, opts, err)
			}
		}
		// The compiler's answers only narrow what may be compiled, and on
		// a GPU inline assembly is not screened: neither refuses what
		// CheckSource accepts.
		narrowed := CheckSourceFor(src, opts, SourceTarget{Predefined: oracle(nil)})
		gpu := CheckSourceFor(src, opts, SourceTarget{OffHost: true})
		if err == nil && (narrowed != nil || gpu != nil) {
			t.Fatalf("CheckSource(%q, %q) = nil, but with the compiler's answers %v, on a GPU %v", src, opts, narrowed, gpu)
		}
		if gpu != nil && !errors.Is(gpu, ErrSourceRejected) || narrowed != nil && !errors.Is(narrowed, ErrSourceRejected) {
			t.Fatalf("CheckSourceFor(%q, %q) = %v, %v, want nil or ErrSourceRejected", src, opts, narrowed, gpu)
		}
	})
}

// asmAndClockSources are programs that use inline assembly or read the
// host's clock, in each spelling the compiler accepts and some it
// does not: written out, through a macro, pasted, in a -D value. Each is
// refused; the error names what.
var asmAndClockSources = []struct {
	name, src, opts, want string
}{
	{"__asm__", `__kernel void k(__global int *v) { __asm__ volatile("syscall"); v[0] = 1; }`, "", `"__asm__"`},
	{"__asm", `__kernel void k(__global int *v) { __asm volatile("syscall"); v[0] = 1; }`, "", `"__asm"`},
	{"asm", `__kernel void k(__global int *v) { asm("syscall"); v[0] = 1; }`, "", `"asm"`},
	{"file scope", "__asm__(\".globl x\");\n__kernel void k(void) {}", "", `"__asm__"`},
	{"asm label", `int f(void) __asm__("getpid"); __kernel void k(void) {}`, "", `"__asm__"`},
	{"macro", "#define SYS __asm__ volatile(\"syscall\")\n__kernel void k(void) { SYS; }", "", `"__asm__"`},
	{"pasted", "#define C(a, b) a##b\n__kernel void k(void) { C(__as, m__)(\"syscall\"); }", "", `"__asm__"`},
	{"pasted in three", "#define C(a, b, c) a##b##c\n__kernel void k(void) { C(_, _as, m)(\"syscall\"); }", "", `"__asm"`},
	{"pasted digraph", "#define C(a, b) a%:%:b\n__kernel void k(void) { C(__a, sm__)(\"syscall\"); }", "", `"__asm__"`},
	{"pasted trigraph", "#define C(a, b) a??=??=b\n__kernel void k(void) { C(__a, sm)(\"syscall\"); }", "", `"__asm"`},
	{"pasted across a splice", "#define C(a, b) a#\\\n#b\n__kernel void k(void) { C(__a, sm)(\"syscall\"); }", "", `"__asm"`},
	{"pieces from options", "#define C(a, b) a##b\n#define X C(P, Q)\n__kernel void k(void) { X(\"syscall\"); }", "-DP=__as -DQ=m__", `"__asm__"`},
	{"-D value", `__kernel void k(void) { X("syscall"); }`, "-DX=__asm__", `"__asm__"`},
	{"-D value pasted", `__kernel void k(void) { X("syscall"); }`, "-D X=__as##m__", `"__asm__"`},
	{"__DATE__", `__constant char d[] = __DATE__;`, "", `"__DATE__"`},
	{"__TIME__", `__constant char d[] = __TIME__;`, "", `"__TIME__"`},
	{"__TIMESTAMP__", `__constant char d[] = __TIMESTAMP__;`, "", `"__TIMESTAMP__"`},
	{"pasted __TIMESTAMP__", "#define C(a, b) a##b\n__constant char d[] = C(__TIME, STAMP__);", "", `"__TIMESTAMP__"`},
}

func TestCheckSourceRefusesAsmAndClock(t *testing.T) {
	for _, tt := range asmAndClockSources {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSource(tt.src, tt.opts)
			if !errors.Is(err, ErrSourceRejected) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckSource(%q, %q) = %v, want ErrSourceRejected naming %s", tt.src, tt.opts, err, tt.want)
			}
		})
	}
	// Pasting is still allowed where its pieces cannot form them.
	for _, src := range []string{
		"#define CONCAT(a, b) a##b\n__kernel void CONCAT(k, 1)(__global int *a, int s, int m) { a[s] = m; }",
		"#define C(a, b) a##b\nint C(time, stamp); int C(as, m);", // asm is no keyword in OpenCL C
		"// __asm__ in a comment\n__kernel void k(void) {}",
	} {
		if err := CheckSource(src, "-DN=4"); err != nil {
			t.Errorf("CheckSource(%q) = %v, want nil", src, err)
		}
	}
}
