package gpu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// random123Shape is the shape of pyopencl's bundled Random123 philox.cl
// with its headers inlined (as the guest ICD sends it): a template macro
// whose body is x86 or PowerPC inline assembly, invoked only under
// "#if R123_USE_MULHILO32_ASM" and "#if R123_USE_MULHILO64_ASM", which
// OpenCL leaves undefined or the header defines to 0 under #ifndef. The
// asm is never compiled.
const random123Shape = `/* openclfeatures.h */
#ifndef R123_STATIC_INLINE
#define R123_STATIC_INLINE inline
#endif
#ifndef R123_USE_MULHILO64_ASM
#define R123_USE_MULHILO64_ASM 0
#endif
/* philox.h: "a template for mulhilo using gnu-style asm syntax" */
#ifdef __powerpc__
#define _mulhilo_asm_tpl(W, Word, INSN)                         \
R123_STATIC_INLINE Word mulhilo##W(Word ax, Word b, Word *hip){ \
    Word dx = 0;                                                \
    __asm__("\n\t"                                              \
        INSN " %0,%1,%2\n\t"                                    \
        : "=r"(dx)                                              \
        : "r"(b), "r"(ax)                                       \
        );                                                      \
    *hip = dx;                                                  \
    return ax*b;                                                \
}
#else
#define _mulhilo_asm_tpl(W, Word, INSN)                         \
R123_STATIC_INLINE Word mulhilo##W(Word ax, Word b, Word *hip){ \
    Word dx;                                                    \
    __asm__("\n\t"                                              \
        INSN " %2\n\t"                                          \
        : "=a"(ax), "=d"(dx)                                    \
        : "r"(b), "0"(ax)                                       \
        );                                                      \
    *hip = dx;                                                  \
    return ax;                                                  \
}
#endif /* __powerpc__ */
#define _mulhilo_dword_tpl(W, Word, Dword)                              \
R123_STATIC_INLINE Word mulhilo##W(Word a, Word b, Word* hip){ \
    Dword product = ((Dword)a)*((Dword)b);                              \
    *hip = product>>W;                                                  \
    return (Word)product;                                               \
}
#if R123_USE_MULHILO32_ASM
#ifdef __powerpc__
_mulhilo_asm_tpl(32, uint, "mulhwu")
#else
_mulhilo_asm_tpl(32, uint, "mull")
#endif /* __powerpc__ */
#else
_mulhilo_dword_tpl(32, uint, ulong)
#endif
#if R123_USE_MULHILO64_ASM
_mulhilo_asm_tpl(64, ulong, "mulq")
#endif
__kernel void philox(__global uint *o) {
	uint hi;
	uint lo = mulhilo32(o[0], 0xD256D193u, &hi);
	o[0] = lo ^ hi;
}
`

// random123Defined is random123Shape with the switches defined by the
// source itself: no name the compiler may predefine decides whether the
// asm is compiled, so even CheckSource (nothing known of the compiler)
// accepts it.
var random123Defined = "#define R123_USE_MULHILO32_ASM 0\n#define R123_USE_MULHILO64_ASM 0\n" + random123Shape

// oracle returns a SourceTarget.Predefined that answers from defined and
// says no to every other name; asked collects the names asked.
func oracle(asked *[]string, defined ...string) func([]string) (map[string]bool, error) {
	return func(names []string) (map[string]bool, error) {
		if asked != nil {
			*asked = append(*asked, names...)
		}
		m := make(map[string]bool, len(names))
		for _, n := range names {
			m[n] = false
		}
		for _, n := range defined {
			m[n] = true
		}
		return m, nil
	}
}

// everyName answers that the compiler predefines every name asked.
func everyName(names []string) (map[string]bool, error) {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m, nil
}

func TestAsmScreenAcceptsRandom123(t *testing.T) {
	if err := CheckSource(random123Defined, ""); err != nil {
		t.Errorf("CheckSource(Random123 with its switches defined 0) = %v, want nil", err)
	}
	var asked []string
	if err := CheckSourceFor(random123Shape, "", SourceTarget{Predefined: oracle(&asked)}); err != nil {
		t.Errorf("CheckSourceFor(Random123, nothing predefined) = %v, want nil", err)
	}
	for _, want := range []string{"R123_USE_MULHILO32_ASM", "R123_USE_MULHILO64_ASM", "__powerpc__"} {
		if !strings.Contains(strings.Join(asked, " "), want) {
			t.Errorf("the compiler was asked %q, not %s", asked, want)
		}
	}
	// Where the compiler might define the switch, the asm might be
	// compiled: refused, as by CheckSource, which knows nothing of it.
	for name, target := range map[string]SourceTarget{
		"CheckSource":                       {},
		"R123_USE_MULHILO32_ASM predefined": {Predefined: oracle(nil, "R123_USE_MULHILO32_ASM")},
		"every name predefined":             {Predefined: everyName},
	} {
		err := CheckSourceFor(random123Shape, "", target)
		if !errors.Is(err, ErrSourceRejected) || !strings.Contains(err.Error(), `"_mulhilo_asm_tpl" -> "__asm__"`) {
			t.Errorf("%s: CheckSourceFor(Random123) = %v, want a refusal naming _mulhilo_asm_tpl", name, err)
		}
	}
	// -D switches it on: the options' macros count as the source's.
	if err := CheckSourceFor(random123Shape, "-DR123_USE_MULHILO32_ASM=1", SourceTarget{Predefined: oracle(nil)}); !errors.Is(err, ErrSourceRejected) {
		t.Errorf("CheckSourceFor(Random123, -DR123_USE_MULHILO32_ASM=1) = %v, want ErrSourceRejected", err)
	}
	if err := CheckSourceFor(random123Shape, "-D R123_USE_MULHILO32_ASM=0 -UR123_USE_MULHILO64_ASM", SourceTarget{Predefined: oracle(nil)}); err != nil {
		t.Errorf("CheckSourceFor(Random123, -D R123_USE_MULHILO32_ASM=0) = %v, want nil", err)
	}
}

// pyopenclRandom123 returns pyopencl's philox.cl (python3-pyopencl) with
// its headers inlined as the guest ICD inlines them, and the kernel
// pyopencl's clrandom wraps around it, or skips.
func pyopenclRandom123(t *testing.T, file string) string {
	t.Helper()
	const dir = "/usr/lib/python3/dist-packages/pyopencl/cl"
	include := regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*["<]([^">]+)[">].*$`)
	var expand func(path string, depth int) string
	expand = func(path string, depth int) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Skipf("pyopencl's Random123 is not installed (python3-pyopencl; scripts/install-deps.sh installs it): %v", err)
		}
		if depth > 8 {
			t.Fatalf("%s: includes nested too deeply", path)
		}
		return include.ReplaceAllStringFunc(string(b), func(line string) string {
			name := include.FindStringSubmatch(line)[1]
			for _, d := range []string{filepath.Dir(path), dir} {
				if p := filepath.Join(d, name); fileExists(p) {
					return expand(p, depth+1)
				}
			}
			return "#error not found"
		})
	}
	return expand(filepath.Join(dir, "pyopencl-random123", file), 0) + `
#ifndef M_PI
#define M_PI 3.14159265359f
#endif
kernel void rng_gen_philox4x32_uniform(int k1, int c0, int c1, int c2, int c3,
	global float *output, long out_size, float scale, float shift)
{
	philox4x32_key_t k = {{get_global_id(0), k1}};
	philox4x32_ctr_t c = {{c0, c1, c2, c3}};
	philox4x32_ctr_t r = philox4x32(c, k);
	if (get_global_id(0) < out_size)
		output[get_global_id(0)] = shift + scale * (r.v[0] * ((float) 2.3283064365386963e-10));
}
`
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestAsmScreenAcceptsPyopenclPhilox: issue 40's library itself.
func TestAsmScreenAcceptsPyopenclPhilox(t *testing.T) {
	src := pyopenclRandom123(t, "philox.cl")
	if !strings.Contains(src, "__asm__") {
		t.Fatal("philox.cl no longer spells __asm__: the test tests nothing")
	}
	if err := CheckSourceFor(src, "", SourceTarget{Predefined: oracle(nil, "M_PI", "__OPENCL_VERSION__")}); err != nil {
		t.Errorf("CheckSourceFor(philox.cl) = %v, want nil", err)
	}
	if err := CheckSource(src, ""); !errors.Is(err, ErrSourceRejected) {
		t.Errorf("CheckSource(philox.cl) = %v, want a refusal: R123_USE_MULHILO32_ASM might be predefined", err)
	}
}

// asmReached are sources whose inline assembly the compiler may compile,
// each way the screen must follow. unknown: the verdict depends on a name
// the compiler may predefine, so a compiler that predefines no name
// accepts it; every other source is refused whatever the compiler says.
var asmReached = []struct {
	name, src, opts, want string
	unknown               bool
}{
	{"written out", `__kernel void k(void) { __asm__ volatile("syscall"); }`, "", `"__asm__"`, false},
	{"__asm", `__kernel void k(void) { __asm("syscall"); }`, "", `"__asm"`, false},
	{"asm", `__kernel void k(void) { asm("syscall"); }`, "", `"asm"`, false},
	{"in a literal", `__constant char s[] = "__asm__";`, "", `"__asm__"`, false},
	{"macro in compiled code", "#define SYS(x) __asm__ volatile(x)\n__kernel void k(void) { SYS(\"syscall\"); }", "", `"__asm__"`, false},
	{"macro named, not called", "#define SYS(x) __asm__(x)\nint SYS;", "", `"SYS"`, false},
	{"#if 1", "#if 1\n__kernel void k(void) { __asm__(\"syscall\"); }\n#endif", "", `"__asm__"`, false},
	{"#if 1 macro", "#define SYS __asm__(\"syscall\")\n#if 1\n__kernel void k(void) { SYS; }\n#endif", "", `"__asm__"`, false},
	{"#else of #if 0", "#if 0\n#else\n__kernel void k(void) { __asm__(\"syscall\"); }\n#endif", "", `"__asm__"`, false},
	{"#elif 1", "#if 0\n#elif 1\n__kernel void k(void) { __asm__(\"syscall\"); }\n#endif", "", `"__asm__"`, false},
	{"#else of a false macro", "#define USE_C 0\n#define SYS __asm__(\"syscall\")\n#if USE_C\n#else\n__kernel void k(void) { SYS; }\n#endif", "", `"__asm__"`, false},
	{"redefined true", "#define USE 0\n#undef USE\n#define USE 1\n#if USE\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"arithmetic", "#define N 3\n#if (N << 2) > 10 && N % 2\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"unsigned arithmetic", "#if -1 > 0u\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"macro body as expression", "#define M 1 + 1\n#if M * 0\n#else\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"function-like in #if", "#define F(x) x\n#if F(0)\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"true in #if", "#if true\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"division by zero", "#if 1 / 0\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"overflow", "#if 0x7fffffffffffffff + 1 < 0\n#else\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"#ifdef unknown", "#ifdef __x86_64__\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, true},
	{"#ifdef unknown picks the macro", "#ifdef __x86_64__\n#define SYS __asm__(\"syscall\")\n#else\n#define SYS\n#endif\n__kernel void k(void) { SYS; }", "", `"__asm__"`, true},
	{"#if on a predefined value", "#if __OPENCL_VERSION__ >= 120\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, true},
	{"#ifndef an unknown guard", "#ifndef HAVE_X\n#define HAVE_X 1\n#endif\n#if HAVE_X\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"defined of a maybe-defined name", "#if 0\n#define D\n#endif\n#ifdef MAYBE\n#define D\n#endif\n#if defined(D)\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, true},
	{"nested macros", "#define A __asm__\n#define B A\n#define C B\n__kernel void k(void) { C(\"syscall\"); }", "", `"C" -> "B" -> "A" -> "__asm__"`, false},
	{"body defined after", "#define OUTER INNER(\"syscall\")\n#define INNER __asm__\n__kernel void k(void) { OUTER; }", "", `"__asm__"`, false},
	{"defined inside the call", "#define ID(x) x\n__kernel void k(void) { ID(X\n#define X __asm__\n(\"syscall\")); }", "", `"__asm__"`, false},
	{"defined later, used before", "__kernel void k(void) { X(\"syscall\"); }\n#define X __asm__", "", `"X"`, false},
	{"$ in a macro's name", "#define A$B __asm__\nA$B(\"syscall\");", "", `"A$B" -> "__asm__"`, false},
	{"UTF-8 macro name", "#define \u00e9 __asm__\n\u00e9(\"syscall\");", "", "\"\u00e9\" -> \"__asm__\"", false},
	{"pasted", "#define C(a, b) a##b\n__kernel void k(void) { C(__as, m__)(\"syscall\"); }", "", `"__asm__"`, false},
	{"pasted macro name", "#define SYSCALL __asm__\n#define C(a, b) a##b\n__kernel void k(void) { C(SYS, CALL)(\"syscall\"); }", "", `"SYSCALL"`, false},
	{"pasted in #if 1", "#if 1\n#define C(a, b) a%:%:b\n#endif\n__kernel void k(void) { C(__a, sm__)(\"syscall\"); }", "", `"__asm__"`, false},
	{"-D value", `__kernel void k(void) { X("syscall"); }`, "-DX=__asm__", `"__asm__"`, false},
	{"-D switch", "#if USE_ASM\n__asm__(\"syscall\");\n#endif", "-DUSE_ASM", `"__asm__"`, false},
	{"-D switch value", "#if USE_ASM == 2\n__asm__(\"syscall\");\n#endif", "-D USE_ASM=2", `"__asm__"`, false},
	{"-D through a macro", "#define SYS X(\"syscall\")\n__kernel void k(void) { SYS; }", "-DX=__asm", `"__asm"`, false},
	{"-D pieces pasted", "#define C(a, b) a##b\n#define X C(P, Q)\n__kernel void k(void) { X(\"syscall\"); }", "-DP=__as -DQ=m__", `"__asm__"`, false},
	{"pragma argument", "#define U __asm__(\"syscall\")\n#pragma unroll U", "", `"__asm__"`, false},
	{"line splice", "__kernel void k(void) { __as\\\nm__(\"syscall\"); }", "", `"__asm__"`, false},
	{"loose splice into a comment", "// off \\ \n#if 0\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"splice makes #if 01", "#if 0\\\n1\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"splice into a comment", "// off \\\n#if 0\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"trigraph directive", "??=define SYS __asm__\nSYS(\"syscall\");", "", `"__asm__"`, false},
	{"trigraph splice", "#if 0??/\n1\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	// With trigraphs (clang's OpenCL C) ??' is ^, no quote: the /* after
	// it opens a comment that hides #if 0 and #endif from the compiler.
	{"trigraph ??' comment", "int x = 1 ??'/*';\n#if 0\n*/ __asm__(\"syscall\"); int y = 2 ??'/*';\n#endif\n*/", "", `"__asm__"`, false},
	{"digraph #if", "%:if 1\n__asm__(\"syscall\");\n%:endif", "", `"__asm__"`, false},
	{"digraph #define", "%:define SYS __asm__\nSYS(\"syscall\");", "", `"__asm__"`, false},
	{"digraph off", "%:if 0\n__asm__(\"syscall\");\n%:endif", "", `"__asm__"`, false},
	{"# after a comment's newline", "int a; /* x\n */ #if 0\n__asm__(\"syscall\");\n#endif", "", `"__asm__"`, false},
	{"unbalanced #endif", "#endif\n#define S __asm__\n", "", `"__asm__"`, false},
	{"no #endif", "#if 0\n#define S __asm__\n", "", `"__asm__"`, false},
	{"#else twice", "#if 1\n#else\n#else\n#endif\n#if 0\n__asm__\n#endif", "", `"__asm__"`, false},
}

// asmNotReached are sources whose inline assembly no compiler compiles.
var asmNotReached = []struct{ name, src, opts string }{
	{"#if 0", "#if 0\n__asm__(\"syscall\");\n#endif\n__kernel void k(void) {}", ""},
	{"defined, never used", "#define SYS __asm__(\"syscall\")\n__kernel void k(void) {}", ""},
	{"used only where skipped", "#if 0\n#define SYS(x) __asm__(x)\n#else\n#define SYS(x)\n#endif\n__kernel void k(void) { SYS(\"syscall\"); }", ""},
	{"a false switch", "#define USE_ASM 0\n#if USE_ASM\n__asm__(\"syscall\");\n#endif", ""},
	{"undefined switch", "#undef USE_ASM\n#ifdef USE_ASM\n__asm__(\"syscall\");\n#elif defined(USE_ASM) || 0\n__asm__(\"syscall\");\n#endif", ""},
	{"arithmetic", "#if (1 - 1) || (2 > 3) || 0x10 != 16 || 07 != 7 || (1 ? 0 : 1)\n__asm__(\"syscall\");\n#endif", ""},
	{"unsigned arithmetic", "#if -1 < 0u\n__asm__(\"syscall\");\n#endif", ""},
	{"short circuit", "#if 0 && UNKNOWN_NAME\n__asm__(\"syscall\");\n#endif\n#if UNKNOWN_NAME && 0\n__asm__(\"syscall\");\n#endif", ""},
	{"taken branch's #elif", "#if 1\n#elif 1 / 0\n__asm__(\"syscall\");\n#else\n__asm__(\"syscall\");\n#endif", ""},
	{"nested in #if 0", "#if 0\n#if 1\n__asm__(\"syscall\");\n#endif\n#endif", ""},
	{"#if in #if 0 unevaluated", "#if 0\n#if 1/0\n#else\n#endif\n__asm__(\"syscall\");\n#endif", ""},
	{"-D switch off", "#if USE_ASM\n__asm__(\"syscall\");\n#endif", "-DUSE_ASM=0"},
	{"-D, -U", "#ifdef USE_ASM\n__asm__(\"syscall\");\n#endif", "-DUSE_ASM -UUSE_ASM"},
	{"comment", "// __asm__(\"syscall\");\n/* __asm__ */ __kernel void k(void) {}", ""},
	{"# line after a comment", "/* a\n b */ #if 0\n__asm__(\"syscall\");\n#endif", ""},
	{"Random123, switches defined", random123Defined, ""},
}

func TestAsmScreenRefusesAsmReached(t *testing.T) {
	for _, tt := range asmReached {
		t.Run(tt.name, func(t *testing.T) {
			for name, target := range map[string]SourceTarget{
				"CheckSource": {}, "every name predefined": {Predefined: everyName}, "none predefined": {Predefined: oracle(nil)},
			} {
				err := CheckSourceFor(tt.src, tt.opts, target)
				if tt.unknown && name == "none predefined" {
					if err != nil {
						t.Errorf("%s: CheckSourceFor(%q, %q) = %v, want nil", name, tt.src, tt.opts, err)
					}
					continue
				}
				if !errors.Is(err, ErrSourceRejected) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: CheckSourceFor(%q, %q) = %v, want ErrSourceRejected naming %s", name, tt.src, tt.opts, err, tt.want)
				}
			}
		})
	}
}

func TestAsmScreenAcceptsAsmNotReached(t *testing.T) {
	for _, tt := range asmNotReached {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckSource(tt.src, tt.opts); err != nil {
				t.Errorf("CheckSource(%q, %q) = %v, want nil", tt.src, tt.opts, err)
			}
			var asked []string
			if err := CheckSourceFor(tt.src, tt.opts, SourceTarget{Predefined: oracle(&asked)}); err != nil || len(asked) > 0 {
				t.Errorf("CheckSourceFor(%q, %q) = %v, asking the compiler %q; want nil, asking nothing", tt.src, tt.opts, err, asked)
			}
		})
	}
}

// TestAsmScreenOffHost: on a GPU inline assembly is the device's own and
// is not screened; everything else is, as on a CPU.
func TestAsmScreenOffHost(t *testing.T) {
	gpu := SourceTarget{OffHost: true}
	for _, tt := range asmReached {
		if err := CheckSourceFor(tt.src, tt.opts, gpu); err != nil {
			t.Errorf("%s: CheckSourceFor(%q, %q, GPU) = %v, want nil", tt.name, tt.src, tt.opts, err)
		}
	}
	for _, src := range append(rejectedSources,
		"__constant char d[] = __DATE__;",
		"#define C(a, b) a##b\n__constant char d[] = C(__TIME, STAMP__);",
		"??' ' /*\n#include \"/etc/passwd\"\n*/",
	) {
		if err := CheckSourceFor(src, "", gpu); !errors.Is(err, ErrSourceRejected) {
			t.Errorf("CheckSourceFor(%q, GPU) = %v, want ErrSourceRejected", src, err)
		}
	}
	if err := CheckSourceFor("", "-DX=__TIME__", gpu); !errors.Is(err, ErrSourceRejected) {
		t.Errorf("CheckSourceFor(-DX=__TIME__, GPU) = %v, want ErrSourceRejected", err)
	}
}

// TestAsmScreenPredefinedError: a compiler that cannot be asked leaves
// the refusal standing.
func TestAsmScreenPredefinedError(t *testing.T) {
	err := CheckSourceFor(random123Shape, "", SourceTarget{Predefined: func([]string) (map[string]bool, error) {
		return nil, errors.New("no compiler")
	}})
	if !errors.Is(err, ErrSourceRejected) || !strings.Contains(err.Error(), "no compiler") {
		t.Errorf("CheckSourceFor = %v, want ErrSourceRejected saying why the compiler was not asked", err)
	}
}

// TestAsmScreenMatchesClang is a property against the compiler itself:
// random programs of #define, #undef, #if, #ifdef, #ifndef, #elif, #else
// and text, with names the source defines and names clang predefines for
// OpenCL C; whenever clang's preprocessor (clang-15 -E -x cl) leaves
// inline assembly in the text it compiles, the screen must refuse the
// program, both knowing nothing of the compiler (CheckSource) and told
// exactly what clang predefines (clang -dM). Skipped without clang-15.
func TestAsmScreenMatchesClang(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs clang")
	}
	clang, err := exec.LookPath("clang-15")
	if err != nil {
		t.Skip("clang-15 not installed (Debian's libpocl2 depends on it; scripts/install-deps.sh installs pocl-opencl-icd)")
	}
	args := []string{"-x", "cl", "-cl-std=CL1.2", "-E", "-P", "-"}
	dm, err := exec.Command(clang, "-x", "cl", "-cl-std=CL1.2", "-E", "-dM", "/dev/null").Output()
	if err != nil {
		t.Fatalf("clang -dM: %v", err)
	}
	predefined := map[string]bool{}
	for _, l := range strings.Split(string(dm), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "#define" {
			name, _, _ := strings.Cut(f[1], "(")
			predefined[name] = true
		}
	}
	fromClang := func(names []string) (map[string]bool, error) {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = predefined[n]
		}
		return m, nil
	}
	var compiled, accepted, notCompiled int
	rapid.Check(t, func(rt *rapid.T) {
		src := genProgram(rt)
		cmd := exec.Command(clang, args...)
		cmd.Stdin = strings.NewReader(src)
		out, err := cmd.Output()
		if err != nil {
			return // the compiler refuses it: nothing is compiled
		}
		if !strings.Contains(string(out), "__asm__") {
			notCompiled++
			if CheckSourceFor(src, "", SourceTarget{Predefined: fromClang}) == nil {
				accepted++
			}
			return
		}
		compiled++
		for name, target := range map[string]SourceTarget{"CheckSource": {}, "clang's predefined macros": {Predefined: fromClang}} {
			if err := CheckSourceFor(src, "", target); !errors.Is(err, ErrSourceRejected) {
				rt.Fatalf("%s: clang compiles inline assembly of\n%s\n-> %s\nbut CheckSourceFor = %v", name, src, out, err)
			}
		}
	})
	t.Logf("asm compiled by clang: %d programs, all refused; not compiled: %d, of which %d accepted with clang's predefined macros", compiled, notCompiled, accepted)
}

var (
	genNames = []string{"A", "B", "C", "__x86_64__", "__OPENCL_VERSION__", "CL_VERSION_1_2", "cl_khr_fp64", "__powerpc__", "UNDEFINED_X", "__ENDIAN_LITTLE__"}
	genOps   = []string{"+", "-", "*", "/", "%", "<<", ">>", "<", ">", "<=", ">=", "==", "!=", "&", "|", "^", "&&", "||"}
	genNums  = []string{"0", "1", "2", "3", "120", "200", "0u", "1u", "0x10", "07", "-1"}
)

func genExpr(rt *rapid.T, depth int) string {
	k := rapid.IntRange(0, 6).Draw(rt, "expr")
	if depth > 2 {
		k %= 3
	}
	switch k {
	case 0:
		return rapid.SampledFrom(genNames).Draw(rt, "name")
	case 1:
		return rapid.SampledFrom(genNums).Draw(rt, "num")
	case 2:
		return "defined(" + rapid.SampledFrom(genNames).Draw(rt, "name") + ")"
	case 3:
		return "!" + genExpr(rt, depth+1)
	case 4:
		return "(" + genExpr(rt, depth+1) + " ? " + genExpr(rt, depth+1) + " : " + genExpr(rt, depth+1) + ")"
	default:
		return "(" + genExpr(rt, depth+1) + " " + rapid.SampledFrom(genOps).Draw(rt, "op") + " " + genExpr(rt, depth+1) + ")"
	}
}

func genBlock(rt *rapid.T, b *strings.Builder, depth int) {
	n := rapid.IntRange(0, 4).Draw(rt, "items")
	for range n {
		name := rapid.SampledFrom([]string{"A", "B", "C"}).Draw(rt, "defname")
		switch k := rapid.IntRange(0, 8).Draw(rt, "item"); {
		case k == 0:
			body := rapid.SampledFrom([]string{"0", "1", "2", "__asm__", "A", "B", "C", "(A + 1)", "__OPENCL_VERSION__"}).Draw(rt, "body")
			fmt.Fprintf(b, "#define %s %s\n", name, body)
		case k == 1:
			fmt.Fprintf(b, "#undef %s\n", name)
		case k == 2:
			b.WriteString("__asm__(\"nop\");\n")
		case k == 3:
			fmt.Fprintf(b, "int x = %s;\n", name)
		case k == 4 && depth > 0:
			body := rapid.SampledFrom([]string{"x", "__asm__(x)", "A x", "x##B", "F(x)"}).Draw(rt, "fnbody")
			fmt.Fprintf(b, "#define F(x) %s\n", body)
		case k == 4:
			arg := rapid.SampledFrom([]string{"\"nop\"", "A", "__as", "B"}).Draw(rt, "arg")
			fmt.Fprintf(b, "int y = F(%s);\n", arg)
		case depth < 3:
			switch rapid.IntRange(0, 2).Draw(rt, "cond") {
			case 0:
				fmt.Fprintf(b, "#if %s\n", genExpr(rt, 0))
			case 1:
				fmt.Fprintf(b, "#ifdef %s\n", rapid.SampledFrom(genNames).Draw(rt, "name"))
			default:
				fmt.Fprintf(b, "#ifndef %s\n", rapid.SampledFrom(genNames).Draw(rt, "name"))
			}
			genBlock(rt, b, depth+1)
			for range rapid.IntRange(0, 2).Draw(rt, "elifs") {
				fmt.Fprintf(b, "#elif %s\n", genExpr(rt, 0))
				genBlock(rt, b, depth+1)
			}
			if rapid.Bool().Draw(rt, "else") {
				b.WriteString("#else\n")
				genBlock(rt, b, depth+1)
			}
			b.WriteString("#endif\n")
		}
	}
}

func genProgram(rt *rapid.T) string {
	var b strings.Builder
	genBlock(rt, &b, 0)
	return b.String()
}
