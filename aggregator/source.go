package aggregator

import (
	"bytes"
	"strings"

	"github.com/vgpud/vgpud/abi"
)

// Program source and build options come from the guest but are compiled by
// a compiler running in vgpud's process on the host. A preprocessor that
// may #include, #embed, __has_include or import modules could read host
// files into the program or its build log. So the source is checked before
// it reaches the compiler:
//
//   - no NUL bytes and no trigraphs ("??=" is "#"); the digraph "%:" counts as "#";
//   - preprocessor directives only from allowedDirectives, and #pragma only
//     "OPENCL ..." or loop unrolling;
//   - no __has_include / __has_include_next anywhere;
//
// and options only from allowedOption (-D definitions, -cl-* flags, -w,
// -Werror). Comments, string literals and line continuations are removed
// before directives are read, so they cannot hide one.

var allowedDirectives = map[string]bool{
	"": true, "define": true, "undef": true, "if": true, "ifdef": true, "ifndef": true,
	"elif": true, "else": true, "endif": true, "error": true, "warning": true, "line": true,
	"pragma": true,
}

var forbiddenIdents = []string{"__has_include", "__has_include_next"}

// checkSource enforces the rules above.
func checkSource(src []byte) error {
	if bytes.IndexByte(src, 0) >= 0 {
		return abi.Errorf(abi.StatusInvalidArgument, "program source contains NUL")
	}
	if bytes.Contains(src, []byte("??")) {
		// Trigraphs (??= is #) would hide a directive from the checks below.
		return abi.Errorf(abi.StatusInvalidArgument, "program source contains a trigraph sequence")
	}
	code := stripCode(src)
	for _, id := range forbiddenIdents {
		if containsIdent(code, id) {
			return abi.Errorf(abi.StatusInvalidArgument, "program source uses %s", id)
		}
	}
	for _, line := range bytes.Split(code, []byte{'\n'}) {
		line = bytes.TrimLeft(line, " \t\v\f\r")
		var rest []byte
		switch {
		case bytes.HasPrefix(line, []byte("#")):
			rest = line[1:]
		case bytes.HasPrefix(line, []byte("%:")): // digraph for #
			rest = line[2:]
		default:
			continue
		}
		rest = bytes.TrimLeft(rest, " \t\v\f\r")
		name := rest[:identLen(rest)]
		if !allowedDirectives[string(name)] {
			return abi.Errorf(abi.StatusInvalidArgument, "preprocessor directive #%.32s not allowed", rest)
		}
		if string(name) == "pragma" {
			arg := bytes.TrimLeft(rest[len(name):], " \t\v\f\r")
			w := string(arg[:identLen(arg)])
			if w != "OPENCL" && w != "unroll" && w != "nounroll" {
				return abi.Errorf(abi.StatusInvalidArgument, "#pragma %.32s not allowed", arg)
			}
		}
	}
	return nil
}

// stripCode returns src with line continuations joined, comments replaced
// by a space, and the contents of string and character literals removed,
// keeping newlines so that directives stay at line starts.
func stripCode(src []byte) []byte {
	// Join continuations first: they apply before comments are recognised.
	joined := bytes.ReplaceAll(bytes.ReplaceAll(src, []byte("\\\r\n"), nil), []byte("\\\n"), nil)
	out := make([]byte, 0, len(joined))
	for i := 0; i < len(joined); i++ {
		c := joined[i]
		switch {
		case c == '/' && i+1 < len(joined) && joined[i+1] == '/':
			for i < len(joined) && joined[i] != '\n' {
				i++
			}
			out = append(out, ' ')
			if i < len(joined) {
				out = append(out, '\n')
			}
		case c == '/' && i+1 < len(joined) && joined[i+1] == '*':
			i += 2
			for i < len(joined) && !(joined[i] == '*' && i+1 < len(joined) && joined[i+1] == '/') {
				if joined[i] == '\n' {
					out = append(out, '\n')
				}
				i++
			}
			i++ // skip '/'
			out = append(out, ' ')
		case c == '"' || c == '\'':
			out = append(out, c)
			i++
			for i < len(joined) && joined[i] != c && joined[i] != '\n' {
				if joined[i] == '\\' {
					i++
				}
				i++
			}
			out = append(out, c)
			if i < len(joined) && joined[i] == '\n' {
				out = append(out, '\n')
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func identLen(b []byte) int {
	n := 0
	for n < len(b) && isIdentByte(b[n]) {
		n++
	}
	return n
}

func containsIdent(code []byte, id string) bool {
	for i := 0; ; {
		j := bytes.Index(code[i:], []byte(id))
		if j < 0 {
			return false
		}
		at := i + j
		end := at + len(id)
		if (at == 0 || !isIdentByte(code[at-1])) && (end == len(code) || !isIdentByte(code[end])) {
			return true
		}
		i = at + 1
	}
}

var allowedFlags = map[string]bool{
	"-w": true, "-Werror": true,
	"-cl-opt-disable": true, "-cl-mad-enable": true, "-cl-no-signed-zeros": true,
	"-cl-unsafe-math-optimizations": true, "-cl-finite-math-only": true,
	"-cl-fast-relaxed-math": true, "-cl-single-precision-constant": true,
	"-cl-denorms-are-zero": true, "-cl-fp32-correctly-rounded-divide-sqrt": true,
	"-cl-kernel-arg-info": true, "-cl-std=CL1.0": true, "-cl-std=CL1.1": true,
	"-cl-std=CL1.2": true, "-cl-std=CL2.0": true, "-cl-std=CL3.0": true,
}

// checkOptions allows -D NAME[=VALUE] (also as two words), and allowedFlags.
func checkOptions(opts []byte) error {
	words := strings.Fields(string(opts))
	for i := 0; i < len(words); i++ {
		w := words[i]
		if allowedFlags[w] {
			continue
		}
		if w == "-D" && i+1 < len(words) {
			i++
			w = "-D" + words[i]
		}
		if def, ok := strings.CutPrefix(w, "-D"); ok && validDefine(def) {
			continue
		}
		return abi.Errorf(abi.StatusInvalidArgument, "build option %.40q not allowed", w)
	}
	return nil
}

func validDefine(s string) bool {
	name, val, _ := strings.Cut(s, "=")
	if name == "" || identLen([]byte(name)) != len(name) || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(val); i++ {
		c := val[i]
		if !isIdentByte(c) && !strings.ContainsRune(".+-*/()", rune(c)) {
			return false
		}
	}
	return true
}
