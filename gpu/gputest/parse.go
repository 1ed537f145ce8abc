package gputest

import (
	"fmt"
	"strings"
	"sync"

	"github.com/vgpud/vgpud/gpu"
)

// kind is what a kernel parameter needs from a launch argument.
type kind uint8

const (
	kindScalar      kind = iota
	kindBuffer           // __global or __constant pointer
	kindLocal            // __local pointer: a size
	kindImage            // image1d_t ... image3d_t: a buffer and a gpu.Image
	kindSampler          // sampler_t: a gpu.Sampler
	kindUnsupported      // image1d_buffer_t, pipe, event, queue: never set from bytes
)

func (k kind) String() string {
	switch k {
	case kindBuffer:
		return "buffer"
	case kindLocal:
		return "local size"
	case kindImage:
		return "image"
	case kindSampler:
		return "sampler"
	case kindUnsupported:
		return "unsupported object"
	}
	return "scalar"
}

// param is one kernel parameter.
type param struct {
	kind  kind
	typ   string // as written, without qualifiers and name, for messages
	size  int    // bytes a scalar must have; 0 when unknown (typedefs, structs): any
	space string // address space: "global", "constant", "local" or "" (private)
	name  string // the parameter's name; "" when it has none
	quals uint32 // gpu.ArgType* bits
}

// signature is one kernel's name and parameters.
type signature struct {
	name   string
	params []param
}

// compiled is what Build makes of a source: the verdict of
// gpu.CheckSource, then the kernels or the parse's error. It is immutable.
type compiled struct {
	screen error
	sigs   []signature
	parse  error
}

type compileKey struct {
	source, options string
	maxKernels      int
}

// compiles memoises compile for every fake device: it is a pure function
// of its key, and tests (fuzzing most) build the same few sources over
// and over, where screening and parsing would be most of the cost. It is
// emptied when it holds more than maxCompiles entries or maxCompileBytes
// of keys.
var compiles struct {
	sync.Mutex
	m     map[compileKey]*compiled
	bytes int
}

const (
	maxCompiles     = 1024
	maxCompileBytes = 8 << 20
)

// compile screens and parses source.
func compile(source, options string, maxKernels int) *compiled {
	key := compileKey{source, options, maxKernels}
	compiles.Lock()
	c, ok := compiles.m[key]
	compiles.Unlock()
	if ok {
		return c
	}
	c = &compiled{screen: gpu.CheckSource(source, options)}
	if c.screen == nil && source != "" {
		c.sigs, c.parse = parse(source, maxKernels)
	}
	size := len(source) + len(options)
	compiles.Lock()
	if compiles.m == nil || len(compiles.m) >= maxCompiles || compiles.bytes+size > maxCompileBytes {
		compiles.m, compiles.bytes = make(map[compileKey]*compiled), 0
	}
	compiles.m[key] = c
	compiles.bytes += size
	compiles.Unlock()
	return c
}

// maxDepth bounds bracket nesting, as clang's default -fbracket-depth does.
const maxDepth = 256

// parse returns the kernels defined in source, in order, or an error whose
// text is the build log.
func parse(source string, maxKernels int) ([]signature, error) {
	l := &lexer{src: source, line: 1, lineStart: true}
	var sigs []signature
	for {
		t, err := l.next()
		if err != nil {
			return nil, err
		}
		if t.text == "" {
			return sigs, nil
		}
		if t.text != "kernel" && t.text != "__kernel" {
			continue
		}
		if t.depth != 0 {
			return nil, errorAt(t.line, "kernel inside a block")
		}
		s, body, err := l.signature()
		if err != nil {
			return nil, err
		}
		if !body {
			continue // a declaration: its definition names the kernel
		}
		for _, o := range sigs {
			if o.name == s.name {
				return nil, errorAt(t.line, "redefinition of kernel %q", s.name)
			}
		}
		if len(sigs) >= maxKernels {
			return nil, errorAt(t.line, "more than %d kernels", maxKernels)
		}
		sigs = append(sigs, s)
	}
}

func errorAt(line int, format string, args ...any) error {
	return fmt.Errorf("line %d: error: "+format, append([]any{line}, args...)...)
}

// token is one token; depth is the number of brackets open after it.
type token struct {
	text  string
	line  int
	depth int
}

// lexer splits OpenCL C into tokens, skipping whitespace, comments and
// preprocessor lines, and checks that brackets balance and that every
// byte outside comments and literals can appear in OpenCL C (ASCII only).
type lexer struct {
	src       string
	i         int
	line      int
	lineStart bool   // nothing but whitespace and comments since the last newline
	open      []byte // brackets open, innermost last
}

// next returns the next token, or one with empty text at the end.
func (l *lexer) next() (token, error) {
	for l.i < len(l.src) {
		c, rest := l.src[l.i], l.src[l.i:]
		switch {
		case c == '\n':
			l.line++
			l.lineStart = true
			l.i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f':
			l.i++
		case strings.HasPrefix(rest, "\\\n"): // line splice
			l.line++
			l.i += 2
		case strings.HasPrefix(rest, "//"):
			for l.i < len(l.src) && l.src[l.i] != '\n' {
				l.i++
			}
		case strings.HasPrefix(rest, "/*"):
			end := strings.Index(rest[2:], "*/")
			if end < 0 {
				return token{}, errorAt(l.line, "unterminated /* comment")
			}
			l.line += strings.Count(rest[:end+2], "\n")
			l.i += end + 4
		case c == '#' && l.lineStart:
			// The fake has no preprocessor: a directive (gpu.CheckSource
			// allowed it) is skipped with its continuation lines.
			for l.i < len(l.src) && l.src[l.i] != '\n' {
				if strings.HasPrefix(l.src[l.i:], "\\\n") {
					l.line++
					l.i++
				}
				l.i++
			}
		default:
			l.lineStart = false
			return l.token()
		}
	}
	if n := len(l.open); n > 0 {
		return token{}, errorAt(l.line, "unclosed %q", l.open[n-1])
	}
	return token{}, nil
}

// token scans the token at l.i, which is not blank.
func (l *lexer) token() (token, error) {
	start, line, c := l.i, l.line, l.src[l.i]
	switch {
	case isIdent(c) && !isDigit(c):
		for l.i < len(l.src) && isIdent(l.src[l.i]) {
			l.i++
		}
	case isDigit(c) || c == '.' && l.i+1 < len(l.src) && isDigit(l.src[l.i+1]):
		for l.i++; l.i < len(l.src); l.i++ {
			d := l.src[l.i]
			exp := (d == '+' || d == '-') && strings.IndexByte("eEpP", l.src[l.i-1]) >= 0
			if !isIdent(d) && d != '.' && !exp {
				break
			}
		}
	case c == '"' || c == '\'':
		for l.i++; ; l.i++ {
			if l.i >= len(l.src) || l.src[l.i] == '\n' {
				return token{}, errorAt(line, "unterminated %c literal", c)
			}
			if d := l.src[l.i]; d == '\\' && l.i+1 < len(l.src) {
				if l.src[l.i+1] == '\n' {
					l.line++
				}
				l.i++
			} else if d == c {
				l.i++
				break
			}
		}
	case c == '(' || c == '[' || c == '{':
		if len(l.open) >= maxDepth {
			return token{}, errorAt(line, "brackets nested deeper than %d", maxDepth)
		}
		l.open = append(l.open, c)
		l.i++
	case c == ')' || c == ']' || c == '}':
		want := "([{"[strings.IndexByte(")]}", c)]
		if n := len(l.open); n == 0 || l.open[n-1] != want {
			return token{}, errorAt(line, "unbalanced %q", c)
		}
		l.open = l.open[:len(l.open)-1]
		l.i++
	case strings.IndexByte("+-*/%&|^!~<>=?:;,.", c) >= 0:
		l.i++
	default:
		return token{}, errorAt(line, "stray byte %#02x in program", c)
	}
	return token{text: l.src[start:l.i], line: line, depth: len(l.open)}, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdent(c byte) bool {
	return c == '_' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// signature parses what follows a kernel keyword at top level:
// [__attribute__((...))]... void NAME(params) and then { or ;. body
// reports a definition ({).
func (l *lexer) signature() (s signature, body bool, err error) {
	t, err := l.next()
	for err == nil && t.text == "__attribute__" {
		if t, err = l.next(); err == nil && t.text != "(" {
			return s, false, errorAt(t.line, "expected ( after __attribute__")
		}
		for outer := t.depth - 1; err == nil && t.text != "" && t.depth > outer; {
			t, err = l.next()
		}
		if err == nil {
			t, err = l.next()
		}
	}
	if err != nil {
		return s, false, err
	}
	if t.text != "void" {
		return s, false, errorAt(t.line, "kernel must return void, not %q", t.text)
	}
	name, err := l.next()
	if err != nil {
		return s, false, err
	}
	if name.text == "" || !isIdent(name.text[0]) || isDigit(name.text[0]) {
		return s, false, errorAt(name.line, "expected a kernel name, got %q", name.text)
	}
	s.name = name.text
	open, err := l.next()
	if err != nil {
		return s, false, err
	}
	if open.text != "(" {
		return s, false, errorAt(open.line, "expected ( after kernel %s", s.name)
	}
	var words [][]string // each parameter's tokens
	cur := []string{}
	for {
		t, err := l.next()
		switch {
		case err != nil:
			return s, false, err
		case t.text == "":
			return s, false, errorAt(t.line, "unexpected end in kernel %s", s.name) // unreachable: next reports the open (
		case t.depth < open.depth: // the closing )
			words = append(words, cur)
		case t.text == "," && t.depth == open.depth:
			words = append(words, cur)
			cur = []string{}
			continue
		default:
			cur = append(cur, t.text)
			continue
		}
		break
	}
	if len(words) == 1 && (len(words[0]) == 0 || len(words[0]) == 1 && words[0][0] == "void") {
		words = nil // f() or f(void)
	}
	for i, w := range words {
		p, err := classify(w)
		if err != nil {
			return s, false, errorAt(open.line, "kernel %s parameter %d: %v", s.name, i, err)
		}
		s.params = append(s.params, p)
	}
	end, err := l.next()
	switch {
	case err != nil:
		return s, false, err
	case end.text != "{" && end.text != ";":
		return s, false, errorAt(end.line, "expected the body of kernel %s, got %q", s.name, end.text)
	}
	return s, end.text == "{", nil
}

var (
	addressSpaces = map[string]string{
		"__global": "global", "global": "global", "__constant": "constant", "constant": "constant",
		"__local": "local", "local": "local", "__private": "private", "private": "private",
	}
	qualifiers = map[string]bool{
		"const": true, "volatile": true, "restrict": true, "__restrict": true,
		"__read_only": true, "read_only": true, "__write_only": true, "write_only": true,
		"__read_write": true, "read_write": true,
	}
	// forbiddenTypes may not be kernel parameters (OpenCL C 1.2 6.9.k).
	forbiddenTypes = map[string]bool{"bool": true, "size_t": true, "ptrdiff_t": true, "intptr_t": true, "uintptr_t": true}
	// imageTypes are the image parameter types gpu.Image describes.
	imageTypes = map[string]bool{"image1d_t": true, "image1d_array_t": true, "image2d_t": true, "image2d_array_t": true, "image3d_t": true}
	// objectTypes are matched in the type name, as the real device does.
	objectTypes  = []string{"image", "sampler", "pipe", "event", "queue"}
	scalarSizes  = map[string]int{"char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "int": 4, "uint": 4, "float": 4, "long": 8, "ulong": 8, "double": 8}
	vectorCounts = map[string]int{"": 1, "2": 2, "3": 4, "4": 4, "8": 8, "16": 16} // a 3-vector is the size of a 4-vector
)

// classify tells a parameter's kind from its tokens.
func classify(toks []string) (param, error) {
	var (
		space string
		ptr   bool
		quals uint32
		words []string // type words, then the name
	)
	for _, t := range toks {
		switch {
		case addressSpaces[t] != "":
			if space != "" {
				return param{}, fmt.Errorf("two address spaces")
			}
			space = addressSpaces[t]
		case qualifiers[t]:
			switch strings.TrimPrefix(t, "__") {
			case "const":
				quals |= gpu.ArgTypeConst
			case "restrict":
				quals |= gpu.ArgTypeRestrict
			case "volatile":
				quals |= gpu.ArgTypeVolatile
			}
		case t == "*":
			ptr = true
		case isIdent(t[0]) && !isDigit(t[0]):
			words = append(words, t)
		default:
			return param{}, fmt.Errorf("unexpected %q", t)
		}
	}
	var name string
	if len(words) >= 2 {
		name, words = words[len(words)-1], words[:len(words)-1] // drop the name
	}
	if len(words) == 0 {
		return param{}, fmt.Errorf("no type")
	}
	p := param{typ: strings.Join(words, " "), space: space, name: name, quals: quals}
	switch {
	case ptr:
		p.typ += "*"
		switch space {
		case "global", "constant":
			p.kind = kindBuffer
		case "local":
			p.kind = kindLocal
		default:
			return param{}, fmt.Errorf("pointer %q must be __global, __constant or __local", p.typ)
		}
	case space == "global" || space == "constant" || space == "local":
		return param{}, fmt.Errorf("%q in the %s address space is not a pointer", p.typ, space)
	case forbiddenTypes[p.typ]:
		return param{}, fmt.Errorf("%q cannot be a kernel parameter", p.typ)
	case imageTypes[p.typ]:
		p.kind = kindImage
	case p.typ == "sampler_t":
		p.kind = kindSampler
	default:
		for _, o := range objectTypes {
			if strings.Contains(p.typ, o) {
				p.kind = kindUnsupported
				return p, nil
			}
		}
		p.size = scalarSize(words)
	}
	return p, nil
}

// scalarSize is the size of a built-in scalar or vector type, 0 for any
// other (a typedef or struct: the fake cannot know).
func scalarSize(words []string) int {
	w := words[len(words)-1]
	switch {
	case len(words) == 1 && (w == "unsigned" || w == "signed"):
		return 4
	case len(words) == 2 && (words[0] == "unsigned" || words[0] == "signed"):
	case len(words) != 1:
		return 0
	}
	base := strings.TrimRight(w, "0123456789")
	n, ok := vectorCounts[w[len(base):]]
	if !ok {
		return 0
	}
	return scalarSizes[base] * n
}
