package reuse

import (
	"fmt"
	"strings"
)

// ArgKind is what a kernel does with one argument.
type ArgKind uint8

// Argument kinds read from a kernel signature.
const (
	ArgScalar ArgKind = iota // by value
	ArgIn                    // __global const or __constant pointer: read only
	ArgOut                   // other __global pointer: treated as written
	ArgLocal                 // __local pointer: no host-visible data
)

func (k ArgKind) String() string {
	switch k {
	case ArgScalar:
		return "scalar"
	case ArgIn:
		return "in"
	case ArgOut:
		return "out"
	case ArgLocal:
		return "local"
	}
	return fmt.Sprintf("ArgKind(%d)", uint8(k))
}

// Kernel is one kernel's signature as read from source.
type Kernel struct {
	Name string
	Args []ArgKind
	// NoReuse, if set, says why the kernel's results are never reused
	// (its Args are still exact).
	NoReuse string
}

// Program is what ParseProgram learned of a program.
type Program struct {
	// Uncertain, if set, says why the source could not be read with
	// certainty: then nothing of the program is reused and every buffer
	// argument of its kernels must be treated as written.
	Uncertain string
	Kernels   map[string]Kernel
}

// Kernel returns the kernel named name and whether its signature is known.
func (p *Program) Kernel(name string) (Kernel, bool) {
	if p == nil || p.Uncertain != "" {
		return Kernel{}, false
	}
	k, ok := p.Kernels[name]
	return k, ok
}

// Reusable reports whether results of kernel name with nargs arguments
// may be reused.
func (p *Program) Reusable(name string, nargs int) bool {
	k, ok := p.Kernel(name)
	return ok && k.NoReuse == "" && len(k.Args) == nargs
}

func uncertain(format string, args ...any) *Program {
	return &Program{Uncertain: fmt.Sprintf(format, args...)}
}

var (
	globalWords   = map[string]bool{"__global": true, "global": true, "__generic": true, "generic": true}
	constantWords = map[string]bool{"__constant": true, "constant": true}
	localWords    = map[string]bool{"__local": true, "local": true}
	privateWords  = map[string]bool{"__private": true, "private": true}
	readOnlyWords = map[string]bool{"__read_only": true, "read_only": true}
	kernelWords   = map[string]bool{"__kernel": true, "kernel": true}
	// keywords whose redefinition would change what the parser reads.
	reserved = map[string]bool{"const": true, "void": true, "__attribute__": true, "restrict": true, "volatile": true,
		"typedef": true, "struct": true, "union": true, "__write_only": true, "write_only": true, "__read_write": true, "read_write": true}
	builtinTypes = map[string]bool{"void": true, "bool": true, "half": true, "size_t": true, "ptrdiff_t": true,
		"intptr_t": true, "uintptr_t": true}
	scalarTypes = []string{"char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "float", "double", "half"}
	// opaque argument types this package does not model.
	opaqueTypes = map[string]bool{"image1d_t": true, "image2d_t": true, "image3d_t": true, "image1d_array_t": true,
		"image2d_array_t": true, "image1d_buffer_t": true, "sampler_t": true, "pipe": true, "queue_t": true, "event_t": true}
)

func init() {
	for _, t := range scalarTypes {
		builtinTypes[t] = true
		for _, n := range []string{"2", "3", "4", "8", "16"} {
			builtinTypes[t+n] = true
		}
	}
	for _, t := range []string{"unsigned", "signed"} {
		builtinTypes[t] = true
	}
}

func isNoReuseIdent(id string) bool {
	for _, p := range []string{"atom", "__opencl_atomic", "__c11_atomic", "__sync_", "__atomic", "work_group_reduce",
		"work_group_scan", "sub_group_reduce", "sub_group_scan"} {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// ParseProgram reads the kernel signatures of OpenCL C source built with
// options. It never fails: what it cannot read with certainty it reports
// in Program.Uncertain. The rules (docs/reuse.md):
//   - __global pointers whose pointee is const, __constant pointers and
//     __read_only arguments are inputs; other __global pointers are written;
//   - a program is uncertain if the preprocessor could change what the
//     signatures say (a directive other than #define and #pragma, a macro
//     name in a signature, a redefined keyword, line splices, trigraphs or
//     digraphs), or if a kernel could write through an input (a cast to a
//     pointer, a non-const __global or generic declaration outside the
//     signatures, a pointer declarator without const, a helper function
//     with pointer parameters, a __builtin);
//   - kernels of a program that names an atomic or a work-group/sub-group
//     collective (whose floating-point order is unspecified) are not reused.
func ParseProgram(source, options string) *Program {
	macros := make(map[string]bool)
	f := strings.Fields(options)
	for i := 0; i < len(f); i++ {
		o := f[i]
		if o == "-D" || o == "-U" {
			if i+1 < len(f) {
				i++
				name, _, _ := strings.Cut(f[i], "=")
				macros[name] = true
			}
			continue
		}
		if strings.HasPrefix(o, "-D") || strings.HasPrefix(o, "-U") {
			name, _, _ := strings.Cut(o[2:], "=")
			macros[name] = true
		}
	}
	toks, why := tokenize(source, macros)
	if why != "" {
		return uncertain("%s", why)
	}
	for m := range macros {
		if reserved[m] || globalWords[m] || constantWords[m] || localWords[m] || privateWords[m] ||
			readOnlyWords[m] || kernelWords[m] || builtinTypes[m] || opaqueTypes[m] {
			return uncertain("macro %s redefines a keyword", m)
		}
	}
	p := &Program{Kernels: make(map[string]Kernel)}
	typedefs := make(map[string]bool)
	noReuse := ""
	depth := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t == "{":
			depth++
			continue
		case t == "}":
			depth--
			continue
		case isNoReuseIdent(t):
			noReuse = "uses " + t
		case strings.HasPrefix(t, "__builtin"):
			return uncertain("uses %s", t)
		case t == "typedef":
			// typedef ... NAME ; record NAME
			for j := i + 1; j < len(toks) && toks[j] != "{"; j++ {
				if toks[j] == ";" {
					typedefs[toks[j-1]] = true
					break
				}
			}
		}
		if macros[t] && depth == 0 && i+1 < len(toks) && toks[i+1] == "(" && kernelAhead(toks, i) {
			return uncertain("macro %s in a signature", t)
		}
		if kernelWords[t] && depth == 0 {
			k, next, why := parseKernel(toks, i, macros)
			if why != "" {
				return uncertain("%s", why)
			}
			if _, dup := p.Kernels[k.Name]; dup {
				return uncertain("kernel %s defined twice", k.Name)
			}
			p.Kernels[k.Name] = k
			i = next - 1
			continue
		}
		if why := checkBodyToken(toks, i, depth, macros, typedefs); why != "" {
			return uncertain("%s", why)
		}
	}
	if depth != 0 {
		return uncertain("unbalanced braces")
	}
	if noReuse != "" {
		for n, k := range p.Kernels {
			k.NoReuse = noReuse
			p.Kernels[n] = k
		}
	}
	return p
}

// kernelAhead reports whether a kernel keyword precedes position i in the
// same top-level declaration.
func kernelAhead(toks []string, i int) bool {
	for j := i - 1; j >= 0; j-- {
		switch toks[j] {
		case ";", "}", "{":
			return false
		}
		if kernelWords[toks[j]] {
			return true
		}
	}
	return false
}

// checkBodyToken applies the rules for tokens outside kernel signatures.
func checkBodyToken(toks []string, i, depth int, macros, typedefs map[string]bool) string {
	t := toks[i]
	if globalWords[t] {
		if !constBeforeStar(toks, i+1) {
			return fmt.Sprintf("writable %s pointer outside a kernel signature", t)
		}
		return ""
	}
	if t != "*" {
		return ""
	}
	if depth == 0 {
		return "pointer outside a function body"
	}
	if i+1 < len(toks) && toks[i+1] == ")" {
		return "pointer cast"
	}
	if i == 0 {
		return ""
	}
	prev := toks[i-1]
	if macros[prev] {
		return fmt.Sprintf("macro %s before a pointer", prev)
	}
	if builtinTypes[prev] || typedefs[prev] || prev == "const" || prev == "*" {
		// A declarator (or a cast): the pointee must be const.
		for j := i - 1; j >= 0; j-- {
			switch toks[j] {
			case "const":
				return ""
			case ";", "{", "}", "(", ",":
				return "pointer declarator without const"
			}
		}
		return "pointer declarator without const"
	}
	if i >= 2 && (toks[i-2] == "struct" || toks[i-2] == "union") {
		return "pointer to a struct"
	}
	return ""
}

// constBeforeStar reports whether const appears from j before the next
// '*' of the same declaration.
func constBeforeStar(toks []string, j int) bool {
	for ; j < len(toks); j++ {
		switch toks[j] {
		case "const":
			return true
		case "*", ";", ",", ")", "{", "}", "(", "=":
			return false
		}
	}
	return false
}

// parseKernel reads "kernel void NAME ( params ) {" at toks[i].
func parseKernel(toks []string, i int, macros map[string]bool) (Kernel, int, string) {
	j := i + 1
	if j < len(toks) && toks[j] == "__attribute__" {
		j++
		d := 0
		for ; j < len(toks); j++ {
			if toks[j] == "(" {
				d++
			} else if toks[j] == ")" {
				d--
				if d == 0 {
					j++
					break
				}
			}
		}
	}
	if j+2 >= len(toks) || toks[j] != "void" || !isIdentTok(toks[j+1]) || toks[j+2] != "(" {
		return Kernel{}, 0, "kernel declaration not of the form kernel void NAME("
	}
	k := Kernel{Name: toks[j+1]}
	if macros[k.Name] || reserved[k.Name] {
		return Kernel{}, 0, fmt.Sprintf("kernel name %s is a macro or keyword", k.Name)
	}
	j += 3
	var param []string
	d := 0
	for ; j < len(toks); j++ {
		t := toks[j]
		if t == "(" {
			d++
		}
		if t == ")" && d > 0 {
			d--
		} else if (t == "," || t == ")") && d == 0 {
			if !(t == ")" && len(k.Args) == 0 && (len(param) == 0 || len(param) == 1 && param[0] == "void")) {
				a, why := classify(param, macros)
				if why != "" {
					return Kernel{}, 0, fmt.Sprintf("kernel %s argument %d: %s", k.Name, len(k.Args), why)
				}
				k.Args = append(k.Args, a)
			}
			param = param[:0]
			if t == ")" {
				j++
				break
			}
			continue
		}
		param = append(param, t)
	}
	if j >= len(toks) || toks[j] != "{" {
		return Kernel{}, 0, fmt.Sprintf("kernel %s: a prototype or attributes after the parameters", k.Name)
	}
	return k, j, ""
}

func classify(param []string, macros map[string]bool) (ArgKind, string) {
	stars := 0
	var space, ro, constBefore bool
	kind := ArgScalar
	for _, t := range param {
		switch {
		case macros[t]:
			return 0, "macro " + t
		case opaqueTypes[t] || t == "[" || t == "(" || t == "struct" || t == "union":
			return 0, "unsupported type " + t
		case t == "*":
			stars++
		case t == "const" && stars == 0:
			constBefore = true
		case globalWords[t]:
			space, kind = true, ArgOut
		case constantWords[t]:
			space, kind = true, ArgIn
		case localWords[t]:
			space, kind = true, ArgLocal
		case privateWords[t]:
			return 0, "private pointer"
		case readOnlyWords[t]:
			ro = true
		}
	}
	switch {
	case stars == 0 && space:
		return 0, "address space without a pointer"
	case stars == 0:
		return ArgScalar, ""
	case stars > 1:
		return 0, "pointer to pointer"
	case !space:
		return 0, "pointer without an address space"
	case kind == ArgOut && (constBefore || ro):
		return ArgIn, ""
	}
	return kind, ""
}

func isIdentTok(t string) bool {
	return t != "" && (t[0] == '_' || t[0] >= 'a' && t[0] <= 'z' || t[0] >= 'A' && t[0] <= 'Z')
}

// tokenize splits source into identifiers, numbers and one-character
// punctuators, dropping comments and literals. It records #define names in
// macros and refuses what could hide text from it.
func tokenize(s string, macros map[string]bool) ([]string, string) {
	var toks []string
	lineStart := true
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n':
			lineStart = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case c == '\\':
			return nil, "line splice"
		case c == '?' && i+1 < len(s) && s[i+1] == '?':
			return nil, "trigraph"
		case (c == '%' || c == '<') && i+1 < len(s) && (s[i+1] == ':' || s[i+1] == '%' || s[i+1] == '>') ||
			c == ':' && i+1 < len(s) && s[i+1] == '>':
			return nil, "digraph"
		case c == '/' && i+1 < len(s) && s[i+1] == '/':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil, "unterminated comment"
			}
			i += end + 4
			continue
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c && s[j] != '\n' {
				j++
			}
			if j >= len(s) || s[j] != c {
				return nil, "unterminated literal"
			}
			toks = append(toks, "lit")
			i = j + 1
			lineStart = false
			continue
		case c == '#' && lineStart:
			j := i + 1
			for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
				j++
			}
			k := j
			for k < len(s) && isIdentByte(s[k]) {
				k++
			}
			switch s[j:k] {
			case "pragma":
				for k < len(s) && s[k] != '\n' {
					k++
				}
			case "define":
				for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
					k++
				}
				m := k
				for m < len(s) && isIdentByte(s[m]) {
					m++
				}
				if m == k {
					return nil, "#define without a name"
				}
				macros[s[k:m]] = true
				k = m
			default:
				return nil, fmt.Sprintf("preprocessor directive #%s", s[j:k])
			}
			i = k
			lineStart = false
			continue
		case isIdentByte(c):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		default:
			toks = append(toks, s[i:i+1])
			i++
		}
		lineStart = false
	}
	return toks, ""
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
