package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// allowedDirectives are the preprocessor directives a program may use.
// Everything else (#include, #include_next, #import, #embed, line markers,
// unknown extensions) could make the compiler read host files.
var allowedDirectives = map[string]bool{
	"": true, "define": true, "undef": true, "if": true, "ifdef": true, "ifndef": true,
	"elif": true, "else": true, "endif": true, "pragma": true, "error": true,
	"warning": true, "line": true, // only "#line NUMBER" (checkDirective)
}

// allowedPragmas are the first words of the #pragma lines a program may use;
// for "clang" the second word must be in allowedClangPragmas.
var (
	allowedPragmas      = map[string]bool{"OPENCL": true, "STDC": true, "unroll": true, "nounroll": true, "clang": true, "once": true, "pack": true}
	allowedClangPragmas = map[string]bool{"loop": true, "diagnostic": true, "fp": true, "attribute": true}
)

// bannedIdentifiers may not appear anywhere outside comments, literals
// included: file probes and the operator that forms pragmas from
// macro-built strings (clang's "#pragma clang __debug llvm_fatal_error"
// aborts the compiler's process; verified with PoCL 3.1).
//
// Token pasting (## and %:%:) can still build them from harmless pieces;
// it is allowed since ABI 1.4 (real OpenCL C needs it: hashcat's
// CONCAT(a, b), Random123's headers). Pasting cannot make a directive, so
// no file's content reaches the program or its build log; what a pasted
// identifier can do is probe whether a path exists in the worker's file
// view, which holds only public distribution files (docs/sandbox.md), or
// crash the compiler, which ends only the worker of the guest's trust
// domain (docs/isolation.md).
var bannedIdentifiers = map[string]bool{
	"__has_include": true, "__has_include_next": true, "__has_embed": true,
	"_Pragma": true, "__pragma": true, "__debug": true,
}

// unpastableIdentifiers are refused in source and -D values, and those
// marked true where token pasting could form them too: inline assembly in
// each spelling (clang accepts __asm__ and __asm in OpenCL C, and asm
// only in GNU modes, which OpenCL C is not: "use of undeclared identifier
// 'asm'" with PoCL 3.1 for every -cl-std), and the macros that give the
// host's clock (__TIMESTAMP__ also the temporary source file's time).
// The clock macros are refused wherever they appear outside comments:
// a program that names them is told so, instead of building with a value
// that lies. Inline assembly is judged by what is compiled, and only where
// kernels run on the host's CPU (asmSpellings, CheckSourceFor).
var unpastableIdentifiers = map[string]bool{
	"asm": false, "__asm": true, "__asm__": true,
	"__DATE__": true, "__TIME__": true, "__TIMESTAMP__": true,
}

// asmSpellings are the spellings of inline assembly among
// unpastableIdentifiers: on a device whose kernels run on the host's CPU
// a kernel with inline assembly makes raw system calls (docs/sandbox.md).
var asmSpellings = map[string]bool{"asm": true, "__asm": true, "__asm__": true}

// SourceTarget is what CheckSourceFor may assume about the device a
// program is built for. The zero value assumes the most: kernels on the
// host's CPU, and nothing known of the compiler's predefined macros.
type SourceTarget struct {
	// OffHost: the device runs kernels on processors of its own (a
	// CL_DEVICE_TYPE_GPU device), so inline assembly in them is the
	// device's own instruction set, not code on the host's CPU, and is not
	// screened. A CPU or accelerator device leaves it false.
	OffHost bool
	// Predefined, if not nil, reports which of names the device's
	// compiler predefines as macros (with the build's options); a name
	// missing from the map is taken as unknown. It is asked only when
	// the verdict on inline assembly depends on such names
	// (gpu/opencl_program.go asks the compiler itself). Without it, every
	// name the source does not #define or #undef may be predefined, with
	// any value.
	Predefined func(names []string) (map[string]bool, error)
}

// CheckSource is CheckSourceFor with the zero SourceTarget: the strictest
// screen, for a device that runs kernels on the host's CPU and whose
// compiler's predefined macros are not known.
func CheckSource(source, options string) error {
	return CheckSourceFor(source, options, SourceTarget{})
}

// CheckSourceFor rejects OpenCL C source and build options that could make
// an in-process compiler read host files or crash it (PoCL 3.1 puts a host
// file's lines into the build log for #include "/etc/...", and aborts the
// process on "#pragma clang __debug llvm_fatal_error"), or give a kernel
// the host's clock or, on the host's CPU, inline assembly. Refused:
// directives outside a small allow-list (so no #include, also when spelled
// with %: or ??= or split by comments and line splices), pragmas outside
// an allow-list, file probes, _Pragma, __debug, universal character names
// in identifiers, NUL bytes, and options other than -D, -U, -w, -Werror,
// -cl-std=CL1.0..CL3.0 and other -cl-* flags; token pasting is allowed
// (ABI 1.4). The clock macros (__DATE__, __TIME__, __TIMESTAMP__) are
// refused written out anywhere outside comments, in a -D value, and
// wherever the source or options paste tokens (## or %:%:) from whose
// identifiers they could be formed.
//
// Inline assembly (asm, __asm, __asm__) is screened only when
// !target.OffHost, and judged by what the compiler will compile
// (checkAsm): the source is preprocessed by a model that follows #if,
// #ifdef, #ifndef, #elif, #else and #endif with the source's own #define
// and #undef in order (after the options' -D and -U), in three-valued
// logic: a condition that depends on a name whose value is not known
// makes its group possibly compiled. Refused is a spelling of inline
// assembly in possibly compiled text (non-directive lines and #pragma
// arguments, inside literals too); a name in that text that is a
// "tainted" macro, one with a possibly compiled #define (anywhere in the
// file, or a -D) whose body spells inline assembly or names a tainted
// macro; a tainted macro's name that the text's identifiers could form
// by pasting; and, as before, a pasted __asm or __asm__. Each reading of
// the source (with and without trigraphs and digraphs, strict and loose
// line splices) is judged, and any refusal refuses. A source whose
// conditionals cannot be followed (unbalanced, or too many alternative
// definitions) has inline assembly refused wherever it is spelled.
// Build calls it first; the error wraps ErrSourceRejected (an
// ErrBuildFailed).
func CheckSourceFor(source, options string, target SourceTarget) error {
	if err := checkOptions(options); err != nil {
		return err
	}
	if err := checkSource(source); err != nil {
		return err
	}
	// -D values are macro bodies: identifiers and pasting as in the source.
	values := macroValues(options)
	if err := checkTokens(values); err != nil {
		return err
	}
	if err := checkPasting(source+"\n"+values, !target.OffHost); err != nil {
		return err
	}
	if target.OffHost {
		return nil
	}
	return checkAsm(source, options, target.Predefined)
}

// macroValues returns the VALUEs of options' -D NAME=VALUE, one a line.
func macroValues(options string) string {
	var b strings.Builder
	fields := strings.Fields(options)
	for i, f := range fields {
		def, ok := strings.CutPrefix(f, "-D")
		if ok && def == "" && i+1 < len(fields) {
			def = fields[i+1]
		}
		if _, v, ok := strings.Cut(def, "="); ok && strings.HasPrefix(f, "-D") {
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// pasteOperators are the spellings of the paste operator, and of # next
// to a %: (two tokens, but cheap to be wary of).
var pasteOperators = []string{"##", "%:%:", "#%:", "%:#"}

// checkPasting refuses text that pastes tokens if an unpastable
// identifier (one of inline assembly only if asm is set) is a
// concatenation of two or more identifiers (or pieces of literals and
// comments) that appear in it, on every reading of it
// (checkSource's): pasting joins whole tokens, and the operands come from
// the text itself. It cannot see identifiers that only the OpenCL
// headers' macros produce; docs/ABI.md says why that is contained.
func checkPasting(text string, asm bool) error {
	for _, v := range [...]struct{ trigraphs, loose bool }{{true, true}, {false, true}, {false, false}} {
		s := spliceLines(text, v.trigraphs, v.loose)
		if !slices.ContainsFunc(pasteOperators, func(op string) bool { return strings.Contains(s, op) }) {
			continue
		}
		words := map[string]bool{}
		for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r < 0x80 && !isIdent(byte(r)) }) {
			words[w] = true
		}
		for _, id := range slices.Sorted(maps.Keys(unpastableIdentifiers)) {
			if !unpastableIdentifiers[id] || asmSpellings[id] && !asm {
				continue
			}
			if pieces := concatenation(id, words); pieces != nil {
				return rejected("%q could be formed by pasting %q (inline assembly and the clock macros are not allowed)", id, pieces)
			}
		}
	}
	return nil
}

// concatenation returns two or more words whose concatenation is id, or
// nil if there are none.
func concatenation(id string, words map[string]bool) []string {
	// from[i]: the last word of a concatenation of id[:i], or "".
	from := make([]string, len(id)+1)
	reach := make([]bool, len(id)+1)
	reach[0] = true
	for i := 1; i <= len(id); i++ {
		for j := 0; j < i; j++ {
			w := id[j:i]
			// The whole of id as one word is checkIdent's, not pasting.
			if reach[j] && words[w] && len(w) < len(id) {
				reach[i], from[i] = true, w
				break
			}
		}
	}
	if !reach[len(id)] {
		return nil
	}
	var pieces []string
	for i := len(id); i > 0; i -= len(from[i]) {
		pieces = append([]string{from[i]}, pieces...)
	}
	return pieces
}

func rejected(format string, args ...any) error {
	args = append(args, ErrSourceRejected)
	return fmt.Errorf("build: "+format+": %w", args...)
}

func checkOptions(options string) error {
	for i := 0; i < len(options); i++ {
		if c := options[i]; c < ' ' && c != '\t' && c != '\n' || c >= 0x7f || c == '"' || c == '\'' || c == '\\' {
			return rejected("option byte %#x at %d", c, i)
		}
	}
	fields := strings.Fields(options)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		switch {
		case f == "-D" || f == "-U":
			if i+1 >= len(fields) || !isMacroDef(fields[i+1]) {
				return rejected("option %s needs a macro name", f)
			}
			i++
		case strings.HasPrefix(f, "-D") || strings.HasPrefix(f, "-U"):
			if !isMacroDef(f[2:]) {
				return rejected("option %q", f)
			}
		case strings.HasPrefix(f, "-cl-std="):
			// C dialects only: C++ for OpenCL has digit separators and raw
			// strings, which this scanner does not model.
			switch f {
			case "-cl-std=CL1.0", "-cl-std=CL1.1", "-cl-std=CL1.2", "-cl-std=CL2.0", "-cl-std=CL3.0":
			default:
				return rejected("option %q not allowed", f)
			}
		case f == "-w" || f == "-Werror" || strings.HasPrefix(f, "-cl-"):
		default:
			return rejected("option %q not allowed", f)
		}
	}
	return nil
}

// isMacroDef reports whether s is NAME or NAME=VALUE.
func isMacroDef(s string) bool {
	name, _, _ := strings.Cut(s, "=")
	if name == "" || isDigit(name[0]) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isIdent(name[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdent(c byte) bool {
	return c == '_' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// trigraphs replaces the nine trigraphs, left to right as translation
// phase 1 does. All nine matter to a reader: ??= is #, ??/ a backslash,
// and ??' (^) is no quote, so a /* after it opens a comment.
var trigraphs = strings.NewReplacer("??=", "#", "??/", "\\", "??'", "^", "??(", "[", "??)", "]",
	"??!", "|", "??<", "{", "??>", "}", "??-", "~")

// spliceLines applies translation phases 1 and 2: the trigraphs if
// trigraphs is set (clang replaces them in OpenCL C), then removes
// backslash-newline splices, also with whitespace before the newline (as
// clang does) if loose is set.
func spliceLines(s string, trigraph, loose bool) string {
	if trigraph {
		s = trigraphs.Replace(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			j := i + 1
			for loose && j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\v' || s[j] == '\f') {
				j++
			}
			if j < len(s) && (s[j] == '\n' || s[j] == '\r') {
				if s[j] == '\r' && j+1 < len(s) && s[j+1] == '\n' {
					j++
				}
				i = j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkSource scans source as each plausible compiler would see it (with
// and without trigraphs, with strict and loose line splices): a splice one
// reading makes could otherwise hide a line the compiler sees.
func checkSource(source string) error {
	if strings.IndexByte(source, 0) >= 0 {
		return rejected("source contains a NUL byte")
	}
	for _, v := range [...]struct{ trigraphs, loose bool }{{true, true}, {false, true}, {false, false}} {
		if err := scan(spliceLines(source, v.trigraphs, v.loose)); err != nil {
			return err
		}
	}
	return nil
}

// scan checks source text after translation phases 1 and 2.
func scan(s string) error {
	lineStart := true // only whitespace and comments since the last newline
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n' || c == '\r':
			lineStart = true
			i++
		case c == ' ' || c == '\t' || c == '\v' || c == '\f':
			i++
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return nil // unterminated comment: nothing follows
			}
			if strings.ContainsAny(s[i:i+2+end], "\n\r") {
				lineStart = true // be conservative about directives after it
			}
			i += 2 + end + 2
		case lineStart && (c == '#' || strings.HasPrefix(s[i:], "%:")):
			if c == '#' {
				i++
			} else {
				i += 2
			}
			lineStart = false
			var err error
			if i, err = checkDirective(s, i); err != nil {
				return err
			}
		case c == '"' || c == '\'':
			lineStart = false
			j := skipLiteral(s, i)
			if err := checkTokens(s[i:j]); err != nil {
				return err
			}
			i = j
		case isIdent(c) || c >= 0x80 || c == '\\':
			lineStart = false
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] >= 0x80 || s[j] == '\\') {
				j++
			}
			if err := checkIdent(s[i:j]); err != nil {
				return err
			}
			i = j
		default:
			lineStart = false
			i++
		}
	}
	return nil
}

func checkIdent(id string) error {
	if bannedIdentifiers[id] || strings.Contains(id, "__debug") || strings.Contains(id, "\\") {
		return rejected("%q is not allowed", id)
	}
	if _, ok := unpastableIdentifiers[id]; ok && !asmSpellings[id] {
		return rejected("%q is not allowed (the clock macros are refused)", id)
	}
	return nil
}

// checkTokens applies the identifier ban to the inside of a literal, in
// case the compiler does not see a literal there.
func checkTokens(lit string) error {
	for _, w := range strings.FieldsFunc(lit, func(r rune) bool { return r < 0x80 && !isIdent(byte(r)) }) {
		if err := checkIdent(w); err != nil {
			return err
		}
	}
	return nil
}

// skipLiteral returns the index after the string or character literal at
// s[i]; a literal ends at its closing quote or, unterminated, at the end of
// the line (as the compiler ends it).
func skipLiteral(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) && s[i+1] != '\n' && s[i+1] != '\r' {
				i++
			}
		case q:
			return i + 1
		case '\n', '\r':
			return i
		}
	}
	return i
}

// checkDirective checks the directive whose name starts after horizontal
// whitespace and comments at s[i] and returns where its name ends.
func checkDirective(s string, i int) (int, error) {
	for i < len(s) {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\v' || s[i] == '\f':
			i++
			continue
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return len(s), nil
			}
			i += 2 + end + 2
			continue
		}
		break
	}
	j := i
	for j < len(s) && (isIdent(s[j]) || s[j] >= 0x80 || s[j] == '\\') {
		j++
	}
	name := s[i:j]
	if !allowedDirectives[name] {
		return j, rejected("directive #%q is not allowed", name)
	}
	if name == "line" {
		// Only #line NUMBER: the presumed line number, never a file name
		// (nor a macro that could expand to one). The guest ICD puts it
		// after the lines it adds before a program's source (ABI 1.7).
		end := j
		for end < len(s) && s[end] != '\n' && s[end] != '\r' {
			end++
		}
		l := stripBlockComments(s[j:end])
		if k := strings.Index(l, "//"); k >= 0 {
			l = l[:k]
		}
		words := strings.Fields(l)
		if len(words) != 1 || strings.Trim(words[0], "0123456789") != "" {
			return j, rejected("#line %s is not allowed: only a line number", strings.Join(words, " "))
		}
		return j, nil
	}
	if name == "pragma" {
		end := j
		for end < len(s) && s[end] != '\n' && s[end] != '\r' {
			end++
		}
		words := strings.Fields(stripBlockComments(s[j:end]))
		if len(words) > 0 && (!allowedPragmas[words[0]] ||
			words[0] == "clang" && (len(words) < 2 || !allowedClangPragmas[words[1]])) {
			return j, rejected("#pragma %s is not allowed", strings.Join(words, " "))
		}
	}
	return j, nil
}

// stripBlockComments replaces each /* */ comment in line with a space.
func stripBlockComments(line string) string {
	var b strings.Builder
	for {
		i := strings.Index(line, "/*")
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:i])
		b.WriteByte(' ')
		end := strings.Index(line[i+2:], "*/")
		if end < 0 {
			return b.String()
		}
		line = line[i+2+end+2:]
	}
}
