package gpu

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// The inline-assembly screen (issue 40): a small model of the C
// preprocessor that tells which text of a source the compiler may
// compile, so that inline assembly a library spells in a branch the
// compiler never takes (Random123's x86 mulhilo under
// "#if R123_USE_MULHILO32_ASM", which OpenCL leaves undefined) does not
// refuse the library, while assembly that can be compiled is refused
// however it is reached: written out, through macros (nested, or from
// -D), pasted, under "#if 1", under a condition on a macro the compiler
// may predefine, or in the #else of a false #if.
//
// The model is sound in one direction only: where it cannot tell, text is
// possibly compiled. Its rules (documented in CheckSourceFor and
// docs/ABI.md):
//
//   - Each reading of the source is modelled (asmReadings): trigraphs and
//     digraphs on and off, strict and loose line splices. Any refusal
//     refuses.
//   - Lines: a directive is a # (or %: with digraphs) that is the first
//     token since the last newline outside comments (as clang decides:
//     a newline inside a block comment does not start a line); comments
//     are blanks; a string or character literal ends at its quote or at
//     the end of its line.
//   - Conditionals are three-valued (no, maybe, yes) and follow clang's
//     chains: a group is possibly compiled if its parent is and its
//     condition is not known false and no earlier branch was certainly
//     taken. Conditions inside a group that is certainly skipped are not
//     evaluated, as the compiler does not evaluate them.
//   - Macro state is flow-sensitive for conditions: #define and #undef in
//     a certainly compiled group replace a name's definition, in a
//     possibly compiled group add an alternative. A name the source never
//     defined or undefined is "initial": predefined or not as the
//     compiler's answer says (SourceTarget.Predefined), else maybe.
//   - A condition is evaluated after object-like macros are replaced,
//     with C's integer arithmetic (intmax_t and uintmax_t); anything the
//     model does not follow exactly (function-like macros, character
//     constants, true and false, overflow, division by zero, a name with
//     several alternative values, a parse error) is unknown, and
//     unknown propagates except through && and || with a known side.
//   - Taint is flow-insensitive: every possibly compiled #define (and
//     every -D) counts, whatever comes between, so that a definition
//     between a macro's name and its arguments cannot escape. Words are
//     runs of letters, digits and underscores, and an identifier with a
//     $ or UTF-8 is a word whole too (clang takes both in names).
//   - The model runs first knowing nothing of the compiler; only if that
//     refuses, and names the compiler may predefine were consulted, is
//     the compiler asked about them (SourceTarget.Predefined), and the
//     source judged again with its answers.

// tri is a three-valued truth: no, maybe, yes (Kleene's logic).
type tri int8

const (
	triNo tri = iota
	triMaybe
	triYes
)

func triAnd(a, b tri) tri { return min(a, b) }
func triOr(a, b tri) tri  { return max(a, b) }
func triNot(a tri) tri    { return triYes - a }

func triOf(b bool) tri {
	if b {
		return triYes
	}
	return triNo
}

// asmReading is one way a compiler may read the source's characters.
type asmReading struct{ trigraphs, loose, digraphs bool }

var asmReadings = [...]asmReading{
	{true, true, true}, {false, true, true}, {false, false, true},
	{true, true, false}, {false, true, false}, {false, false, false},
}

// Bounds of the model: past them it gives up, and inline assembly is
// refused wherever it is spelled (the screen before issue 40).
const (
	maxMacroAlternatives = 32      // alternative definitions of one name
	maxCondTokens        = 1 << 14 // tokens of one condition after replacement
	maxCondDepth         = 64      // nested macro replacements in a condition
	maxGroupDepth        = 4096    // nested conditional groups
	maxPredefinedNames   = 4096    // names one SourceTarget.Predefined call is asked
)

// checkAsm is the inline-assembly screen of CheckSourceFor, for a device
// whose kernels run on the host's CPU.
func checkAsm(source, options string, predefined func([]string) (map[string]bool, error)) error {
	opts := optionMacros(options)
	texts := make([]string, len(asmReadings))
	for i, r := range asmReadings {
		texts[i] = spliceLines(source, r.trigraphs, r.loose)
	}
	queried := map[string]bool{}
	var first error
	for i, r := range asmReadings {
		m := newPPModel(nil)
		if err := m.judge(texts[i], r.digraphs, opts); err != nil && first == nil {
			first = err
		}
		for n := range m.queried {
			queried[n] = true
		}
	}
	if first == nil || predefined == nil || len(queried) == 0 {
		return first
	}
	// The verdict depends on names the compiler may predefine: ask it, and
	// judge again with its answers.
	var names []string
	for n := range queried {
		if isPlainIdent(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) > maxPredefinedNames {
		names = names[:maxPredefinedNames]
	}
	answers, err := predefined(names)
	if err != nil {
		return fmt.Errorf("%w (the compiler's predefined macros could not be read: %v)", first, err)
	}
	for i, r := range asmReadings {
		if err := newPPModel(answers).judge(texts[i], r.digraphs, opts); err != nil {
			return err
		}
	}
	return nil
}

func isPlainIdent(s string) bool {
	if s == "" || isDigit(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isIdent(s[i]) {
			return false
		}
	}
	return true
}

// optionMacro is one -D or -U of the options, in order.
type optionMacro struct {
	undef       bool
	name, value string
}

// optionMacros returns the options' -D and -U (checkOptions has checked
// their form). -DNAME defines NAME as 1, as compilers do.
func optionMacros(options string) []optionMacro {
	var out []optionMacro
	fields := strings.Fields(options)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 2 || f[0] != '-' || f[1] != 'D' && f[1] != 'U' {
			continue
		}
		def := f[2:]
		if def == "" && i+1 < len(fields) {
			i++
			def = fields[i]
		}
		name, value, ok := strings.Cut(def, "=")
		if !ok {
			value = "1"
		}
		out = append(out, optionMacro{undef: f[1] == 'U', name: name, value: value})
	}
	return out
}

// ---- Lexing ---------------------------------------------------------

type tokKind uint8

const (
	tokIdent tokKind = iota
	tokNumber
	tokLiteral
	tokPunct
)

type ppToken struct {
	kind  tokKind
	text  string // punctuators normalised: %: is #, %:%: is ##
	space bool   // blanks or a comment before it on its line
}

// ppLine is a logical line: a directive's tokens after its #, or text.
type ppLine struct {
	directive bool
	toks      []ppToken
}

// lexLines splits s (after translation phases 1 and 2) into lines of
// preprocessing tokens, as clang does: comments are blanks (a newline
// inside a block comment ends no line), a literal ends at its closing
// quote or at the end of its line, and a # is a directive's when no token
// precedes it since the last newline.
func lexLines(s string, digraphs bool) []ppLine {
	var lines []ppLine
	var cur ppLine
	space := false
	add := func(t ppToken) {
		t.space = space
		space = false
		if !cur.directive && len(cur.toks) == 0 && t.kind == tokPunct && t.text == "#" {
			cur.directive = true
			return
		}
		cur.toks = append(cur.toks, t)
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n' || c == '\r':
			if cur.directive || len(cur.toks) > 0 {
				lines = append(lines, cur)
			}
			cur, space = ppLine{}, false
			i++
		case c == ' ' || c == '\t' || c == '\v' || c == '\f':
			space = true
			i++
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' && s[i] != '\r' {
				i++
			}
			space = true
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				i = len(s) // unterminated: the compiler fails
			} else {
				i += 2 + end + 2
			}
			space = true
		case c == '"' || c == '\'':
			j := skipLiteral(s, i)
			add(ppToken{kind: tokLiteral, text: s[i:j]})
			i = j
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i + 1
			for j < len(s) {
				d := s[j]
				switch {
				case isIdent(d) || d == '.' || d == '$' || d >= 0x80:
					j++
				case (d == '+' || d == '-') && strings.ContainsRune("eEpP", rune(s[j-1])):
					j++
				default:
					goto number
				}
			}
		number:
			add(ppToken{kind: tokNumber, text: s[i:j]})
			i = j
		case isIdent(c) || c == '$' || c >= 0x80:
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] == '$' || s[j] >= 0x80) {
				j++
			}
			add(ppToken{kind: tokIdent, text: s[i:j]})
			i = j
		default:
			p := s[i : i+1]
			for _, op := range [...]string{"%:%:", "##", "%:", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||"} {
				if strings.HasPrefix(s[i:], op) && (digraphs || op[0] != '%') {
					p = op
					break
				}
			}
			i += len(p)
			switch p {
			case "%:":
				p = "#"
			case "%:%:":
				p = "##"
			}
			add(ppToken{kind: tokPunct, text: p})
		}
	}
	if cur.directive || len(cur.toks) > 0 {
		lines = append(lines, cur)
	}
	return lines
}

// words returns the identifier-like words of s: its runs of letters,
// digits and underscores (checkTokens' split; a $ or a byte >= 0x80
// separates, so a word is found whatever a compiler makes of them).
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r >= 0x80 || !isIdent(byte(r)) })
}

// tokenWords returns t's words and, for an identifier with a $ or a byte
// >= 0x80 (clang takes both in identifiers: "#define A$B" and UTF-8 names
// are macros), the identifier whole.
func tokenWords(t ppToken) []string {
	w := words(t.text)
	if t.kind == tokIdent && (len(w) != 1 || w[0] != t.text) {
		w = append(w, t.text)
	}
	return w
}

// ---- The model ------------------------------------------------------

// macroDef is one #define (or -D) in possibly compiled text.
type macroDef struct {
	name   string
	fn     bool      // function-like
	body   []ppToken // the replacement list
	words  []string  // every word of the body (parameters and literals too)
	direct string    // a spelling of inline assembly among words, or ""
	key    string    // identifies the definition among alternatives
}

// altKind is what one alternative of a name's macro state is.
type altKind uint8

const (
	altInitial altKind = iota // as the compiler left it: predefined or not
	altUndef
	altDef
)

type macroAlt struct {
	kind altKind
	def  *macroDef
}

// condGroup is one open #if chain.
type condGroup struct {
	parent  tri // the enclosing text
	taken   tri // an earlier branch of the chain was taken
	active  tri // this branch's text is compiled
	sawElse bool
}

type ppModel struct {
	answers map[string]bool // the compiler's predefined names; nil: unknown
	queried map[string]bool // initial names whose definedness was needed and unknown

	state  map[string][]macroAlt  // flow-sensitive, for conditions
	defs   map[string][]*macroDef // every possibly compiled definition
	groups []condGroup

	textWords []string        // words of possibly compiled text, first occurrence order
	textSeen  map[string]bool // the same, as a set
	failed    string          // why the model gave up, or ""
}

func newPPModel(answers map[string]bool) *ppModel {
	return &ppModel{
		answers: answers, queried: map[string]bool{},
		state: map[string][]macroAlt{}, defs: map[string][]*macroDef{}, textSeen: map[string]bool{},
	}
}

func (m *ppModel) active() tri {
	if len(m.groups) == 0 {
		return triYes
	}
	return m.groups[len(m.groups)-1].active
}

func (m *ppModel) fail(why string) {
	if m.failed == "" {
		m.failed = why
	}
}

// judge models text (one reading of the source) after the options'
// macros, and returns the refusal, if any.
func (m *ppModel) judge(text string, digraphs bool, opts []optionMacro) error {
	for _, o := range opts {
		if o.undef {
			m.undef(o.name, triYes)
			continue
		}
		var body []ppToken
		for _, l := range lexLines(o.value, digraphs) {
			body = append(body, l.toks...)
		}
		m.define(o.name, false, body, triYes)
	}
	lines := lexLines(text, digraphs)
	for _, l := range lines {
		if m.failed != "" {
			break
		}
		m.line(l)
	}
	if len(m.groups) > 0 {
		m.fail("an #if without #endif")
	}
	if m.failed != "" {
		// Blanket: inline assembly spelled anywhere outside comments.
		for _, l := range lines {
			for _, t := range l.toks {
				for _, w := range words(t.text) {
					if asmSpellings[w] {
						return rejected("%q is not allowed: inline assembly, and the source's conditionals could not be followed (%s)", w, m.failed)
					}
				}
			}
		}
		for _, o := range opts {
			for _, w := range words(o.value) {
				if asmSpellings[w] {
					return rejected("%q is not allowed: inline assembly, and the source's conditionals could not be followed (%s)", w, m.failed)
				}
			}
		}
		return nil
	}
	pastes := func(s string) bool {
		return slices.ContainsFunc(pasteOperators, func(op string) bool { return strings.Contains(s, op) })
	}
	return m.verdict(pastes(text) || slices.ContainsFunc(opts, func(o optionMacro) bool { return pastes(o.value) }))
}

// verdict refuses inline assembly that possibly compiled text reaches.
// pastes: the text may paste tokens.
func (m *ppModel) verdict(pastes bool) error {
	for _, w := range m.textWords {
		if asmSpellings[w] {
			return rejected("%q is not allowed: inline assembly in code that is compiled, and the device runs kernels on the host's CPU", w)
		}
	}
	// via[n]: the tainted name (or spelling) n's definition reaches first.
	via := map[string]string{}
	users := map[string][]string{}
	var queue []string
	for _, name := range slices.Sorted(maps.Keys(m.defs)) {
		for _, d := range m.defs[name] {
			if d.direct != "" {
				if _, ok := via[name]; !ok {
					via[name] = d.direct
					queue = append(queue, name)
				}
			}
			for _, w := range d.words {
				users[w] = append(users[w], name)
			}
		}
	}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		for _, u := range users[t] {
			if _, ok := via[u]; !ok {
				via[u] = t
				queue = append(queue, u)
			}
		}
	}
	if len(via) == 0 {
		return nil
	}
	chain := func(n string) string {
		path := []string{strconv.Quote(n)}
		for len(path) <= len(via) {
			n = via[n]
			path = append(path, strconv.Quote(n))
			if asmSpellings[n] {
				break
			}
		}
		return strings.Join(path, " -> ")
	}
	for _, w := range m.textWords {
		if _, ok := via[w]; ok {
			return rejected("%s: macro %q expands to inline assembly in code that is compiled, and the device runs kernels on the host's CPU", chain(w), w)
		}
	}
	if !pastes {
		return nil
	}
	// Pasting joins whole tokens of the text and of macro bodies: refuse a
	// tainted name those could form.
	pieces := map[string]bool{}
	for _, w := range m.textWords {
		pieces[w] = true
	}
	for _, ds := range m.defs {
		for _, d := range ds {
			for _, w := range d.words {
				pieces[w] = true
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(via)) {
		if asmSpellings[n] {
			continue
		}
		if p := concatenation(n, pieces); p != nil {
			return rejected("%s: macro %q, which expands to inline assembly, could be formed by pasting %q", chain(n), n, p)
		}
	}
	return nil
}

func (m *ppModel) addText(toks []ppToken) {
	for _, t := range toks {
		for _, w := range tokenWords(t) {
			if !m.textSeen[w] {
				m.textSeen[w] = true
				m.textWords = append(m.textWords, w)
			}
		}
	}
}

func (m *ppModel) line(l ppLine) {
	act := m.active()
	if !l.directive {
		if act != triNo {
			m.addText(l.toks)
		}
		return
	}
	if len(l.toks) == 0 || l.toks[0].kind != tokIdent {
		return // the null directive; anything else the compiler refuses
	}
	name, args := l.toks[0].text, l.toks[1:]
	switch name {
	case "if", "ifdef", "ifndef":
		if len(m.groups) >= maxGroupDepth {
			m.fail("conditionals nested too deeply")
			return
		}
		g := condGroup{parent: act, taken: triYes}
		if act != triNo {
			c := m.condition(name, args)
			g.active, g.taken = triAnd(act, c), c
		}
		m.groups = append(m.groups, g)
	case "elif", "elifdef", "elifndef":
		if len(m.groups) == 0 || m.groups[len(m.groups)-1].sawElse {
			m.fail("#" + name + " without #if, or after #else")
			return
		}
		g := &m.groups[len(m.groups)-1]
		if g.parent == triNo || g.taken == triYes {
			g.active = triNo
			return
		}
		c := m.condition(name, args)
		g.active = triAnd(g.parent, triAnd(triNot(g.taken), c))
		g.taken = triOr(g.taken, c)
	case "else":
		if len(m.groups) == 0 || m.groups[len(m.groups)-1].sawElse {
			m.fail("#else without #if, or after #else")
			return
		}
		g := &m.groups[len(m.groups)-1]
		g.active = triAnd(g.parent, triNot(g.taken))
		g.taken, g.sawElse = triYes, true
	case "endif":
		if len(m.groups) == 0 {
			m.fail("#endif without #if")
			return
		}
		m.groups = m.groups[:len(m.groups)-1]
	case "define":
		if act == triNo || len(args) == 0 || args[0].kind != tokIdent {
			return
		}
		body, fn := args[1:], false
		if len(body) > 0 && body[0].text == "(" && !body[0].space {
			fn = true
			if end := slices.IndexFunc(body, func(t ppToken) bool { return t.text == ")" }); end >= 0 {
				body = body[end+1:]
			} // else the compiler refuses it; the parameters stay in the body
		}
		m.define(args[0].text, fn, body, act)
	case "undef":
		if act != triNo && len(args) > 0 && args[0].kind == tokIdent {
			m.undef(args[0].text, act)
		}
	case "pragma":
		// Some pragmas' arguments are macro-expanded: text, to be safe.
		if act != triNo {
			m.addText(args)
		}
	}
}

func (m *ppModel) alts(name string) []macroAlt {
	if a, ok := m.state[name]; ok {
		return a
	}
	return []macroAlt{{kind: altInitial}}
}

// setAlt makes a the only alternative of name (act yes) or adds it.
func (m *ppModel) setAlt(name string, a macroAlt, act tri) {
	if act == triYes {
		m.state[name] = []macroAlt{a}
		return
	}
	cur := m.alts(name)
	for _, c := range cur {
		if c.kind == a.kind && (a.kind != altDef || c.def.key == a.def.key) {
			return
		}
	}
	if len(cur) >= maxMacroAlternatives {
		m.fail(fmt.Sprintf("more than %d alternative definitions of %s", maxMacroAlternatives, name))
		return
	}
	m.state[name] = append(slices.Clip(cur), a)
}

func (m *ppModel) define(name string, fn bool, body []ppToken, act tri) {
	d := &macroDef{name: name, fn: fn, body: body}
	var key strings.Builder
	if fn {
		key.WriteString("(")
	}
	for _, t := range body {
		key.WriteString(" " + t.text)
		for _, w := range tokenWords(t) {
			d.words = append(d.words, w)
			if asmSpellings[w] && d.direct == "" {
				d.direct = w
			}
		}
	}
	d.key = key.String()
	m.defs[name] = append(m.defs[name], d)
	m.setAlt(name, macroAlt{kind: altDef, def: d}, act)
}

func (m *ppModel) undef(name string, act tri) {
	m.setAlt(name, macroAlt{kind: altUndef}, act)
}

// initialDefined is whether the compiler predefines name.
func (m *ppModel) initialDefined(name string) tri {
	if v, ok := m.answers[name]; ok {
		return triOf(v)
	}
	m.queried[name] = true
	return triMaybe
}

// isDefined is defined(name) at this point of the source.
func (m *ppModel) isDefined(name string) tri {
	var r tri
	for i, a := range m.alts(name) {
		var d tri
		switch a.kind {
		case altUndef:
			d = triNo
		case altDef:
			d = triYes
		default:
			d = m.initialDefined(name)
		}
		if i == 0 {
			r = d
		} else if r != d {
			return triMaybe
		}
	}
	return r
}

// condition evaluates the condition of #if, #ifdef, #ifndef, #elif,
// #elifdef or #elifndef.
func (m *ppModel) condition(directive string, args []ppToken) tri {
	switch directive {
	case "ifdef", "ifndef", "elifdef", "elifndef":
		if len(args) == 0 || args[0].kind != tokIdent {
			return triMaybe // the compiler refuses it
		}
		d := m.isDefined(args[0].text)
		if strings.HasSuffix(directive, "ndef") {
			d = triNot(d)
		}
		return d
	}
	e := condEval{m: m}
	items, ok := e.expand(args, nil, 0)
	if !ok {
		return triMaybe
	}
	p := condParser{items: items}
	v, ok := p.comma()
	if !ok || p.pos != len(items) || !v.known {
		return triMaybe
	}
	return triOf(v.v != 0)
}

// ---- Conditions -----------------------------------------------------

// cval is a value in a condition: intmax_t or uintmax_t, or unknown.
type cval struct {
	known    bool
	unsigned bool
	v        uint64 // two's complement when signed
}

var unknownVal = cval{}

func signedVal(v int64) cval { return cval{known: true, v: uint64(v)} }
func boolVal(b bool) cval {
	if b {
		return signedVal(1)
	}
	return signedVal(0)
}

// citem is an operator or a value of a condition after replacement.
type citem struct {
	op  string // "" for a value
	val cval
}

type condEval struct {
	m      *ppModel
	tokens int
}

// expand replaces macros in toks (hide: the macros being replaced) and
// turns literals and defined into values; ok is false if the condition is
// beyond the model.
func (e *condEval) expand(toks []ppToken, hide []string, depth int) ([]citem, bool) {
	if depth > maxCondDepth {
		return nil, false
	}
	var out []citem
	for i := 0; i < len(toks); i++ {
		if e.tokens++; e.tokens > maxCondTokens {
			return nil, false
		}
		t := toks[i]
		switch t.kind {
		case tokNumber:
			out = append(out, citem{val: parseCondNumber(t.text)})
			continue
		case tokLiteral:
			if t.text[0] != '\'' {
				return nil, false // a string: the compiler refuses it
			}
			out = append(out, citem{val: unknownVal})
			continue
		case tokPunct:
			out = append(out, citem{op: t.text})
			continue
		}
		name := t.text
		if name == "defined" {
			j := i + 1
			paren := j < len(toks) && toks[j].text == "("
			if paren {
				j++
			}
			if j >= len(toks) || toks[j].kind != tokIdent {
				return nil, false
			}
			operand := toks[j].text
			if paren {
				j++
				if j >= len(toks) || toks[j].text != ")" {
					return nil, false
				}
			}
			i = j
			if depth > 0 {
				// defined produced by a macro: undefined behaviour.
				out = append(out, citem{val: unknownVal})
				continue
			}
			switch e.m.isDefined(operand) {
			case triYes:
				out = append(out, citem{val: signedVal(1)})
			case triNo:
				out = append(out, citem{val: signedVal(0)})
			default:
				out = append(out, citem{val: unknownVal})
			}
			continue
		}
		call := i+1 < len(toks) && toks[i+1].text == "("
		skipCall := func() bool {
			depth := 0
			for j := i + 1; j < len(toks); j++ {
				switch toks[j].text {
				case "(":
					depth++
				case ")":
					if depth--; depth == 0 {
						i = j
						return true
					}
				}
			}
			return false
		}
		alts := e.m.alts(name)
		if name == "true" || name == "false" || slices.Contains(hide, name) {
			out = append(out, citem{val: unknownVal})
			continue
		}
		if len(alts) == 1 && alts[0].kind == altDef && !alts[0].def.fn {
			sub, ok := e.expand(alts[0].def.body, append(hide, name), depth+1)
			if !ok {
				return nil, false
			}
			out = append(out, citem{op: "("})
			out = append(out, sub...)
			out = append(out, citem{op: ")"})
			// C replaces tokens, not values; parentheses differ only
			// where the body is not a whole expression, so be exact:
			// refuse to model a body that is not one.
			if !wholeExpression(sub) {
				return nil, false
			}
			continue
		}
		// A value per alternative, if each has a simple one.
		v, all := cval{}, true
		for k, a := range alts {
			var av cval
			switch {
			case a.kind == altUndef:
				av = signedVal(0)
			case a.kind == altInitial:
				if e.m.initialDefined(name) == triNo {
					av = signedVal(0)
				}
			case !a.def.fn && len(a.def.body) == 1 && a.def.body[0].kind == tokNumber:
				av = parseCondNumber(a.def.body[0].text)
			}
			if !av.known || k > 0 && av != v {
				all = false
			}
			v = av
		}
		if call {
			// A function-like macro (or a builtin such as __has_feature):
			// its value is not modelled.
			if !skipCall() {
				return nil, false
			}
			out = append(out, citem{val: unknownVal})
			continue
		}
		if !all {
			v = unknownVal
		}
		out = append(out, citem{val: v})
	}
	return out, true
}

// wholeExpression reports whether items parse as one expression, so that
// wrapping them in parentheses changes nothing.
func wholeExpression(items []citem) bool {
	p := condParser{items: items}
	_, ok := p.comma()
	return ok && p.pos == len(items)
}

// parseCondNumber is the value of an integer constant in a condition.
func parseCondNumber(s string) cval {
	lower := strings.ToLower(s)
	suffix := lower[strings.LastIndexFunc(lower, func(r rune) bool { return r != 'u' && r != 'l' })+1:]
	digits := lower[:len(lower)-len(suffix)]
	switch suffix {
	case "", "u", "l", "ul", "lu", "ll", "ull", "llu":
	default:
		return unknownVal
	}
	base := 10
	switch {
	case strings.HasPrefix(digits, "0x"):
		base, digits = 16, digits[2:]
	case strings.HasPrefix(digits, "0b"):
		base, digits = 2, digits[2:]
	case len(digits) > 1 && digits[0] == '0':
		base, digits = 8, digits[1:]
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil || digits == "" {
		return unknownVal
	}
	return cval{known: true, unsigned: strings.Contains(suffix, "u") || v > math.MaxInt64, v: v}
}

type condParser struct {
	items []citem
	pos   int
}

func (p *condParser) peek() string {
	if p.pos < len(p.items) {
		return p.items[p.pos].op
	}
	return "\x00"
}

func (p *condParser) comma() (cval, bool) {
	v, ok := p.ternary()
	for ok && p.peek() == "," {
		p.pos++
		v, ok = p.ternary()
	}
	return v, ok
}

func (p *condParser) ternary() (cval, bool) {
	c, ok := p.binary(1)
	if !ok || p.peek() != "?" {
		return c, ok
	}
	p.pos++
	a, ok := p.comma()
	if !ok || p.peek() != ":" {
		return unknownVal, false
	}
	p.pos++
	b, ok := p.ternary()
	if !ok {
		return unknownVal, false
	}
	if !c.known || !a.known || !b.known {
		return unknownVal, true
	}
	r := b
	if c.v != 0 {
		r = a
	}
	r.unsigned = a.unsigned || b.unsigned
	return r, true
}

var binaryPrec = map[string]int{
	"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
	"<": 7, ">": 7, "<=": 7, ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}

func (p *condParser) binary(minPrec int) (cval, bool) {
	l, ok := p.unary()
	if !ok {
		return l, false
	}
	for {
		op := p.peek()
		prec, isOp := binaryPrec[op]
		if !isOp || prec < minPrec {
			return l, true
		}
		p.pos++
		r, ok := p.binary(prec + 1)
		if !ok {
			return unknownVal, false
		}
		l = applyBinary(op, l, r)
	}
}

func (p *condParser) unary() (cval, bool) {
	if p.pos >= len(p.items) {
		return unknownVal, false
	}
	it := p.items[p.pos]
	p.pos++
	switch it.op {
	case "":
		return it.val, true
	case "(":
		v, ok := p.comma()
		if !ok || p.peek() != ")" {
			return unknownVal, false
		}
		p.pos++
		return v, true
	case "+", "-", "~", "!":
		v, ok := p.unary()
		if !ok || !v.known {
			return unknownVal, ok
		}
		switch it.op {
		case "-":
			if !v.unsigned && v.v == 1<<63 {
				return unknownVal, true // overflow
			}
			v.v = -v.v
		case "~":
			v.v = ^v.v
		case "!":
			return boolVal(v.v == 0), true
		}
		return v, true
	}
	return unknownVal, false
}

// applyBinary is C's binary operator on intmax_t and uintmax_t, unknown
// where the result is not defined or implementation-defined.
func applyBinary(op string, l, r cval) cval {
	switch op {
	case "&&":
		switch {
		case l.known && l.v == 0, r.known && r.v == 0:
			return boolVal(false)
		case l.known && r.known:
			return boolVal(true)
		}
		return unknownVal
	case "||":
		switch {
		case l.known && l.v != 0, r.known && r.v != 0:
			return boolVal(true)
		case l.known && r.known:
			return boolVal(false)
		}
		return unknownVal
	}
	if !l.known || !r.known {
		return unknownVal
	}
	switch op {
	case "<<", ">>":
		n := r.v
		if !r.unsigned && int64(n) < 0 || n >= 64 {
			return unknownVal
		}
		if l.unsigned {
			if op == "<<" {
				return cval{known: true, unsigned: true, v: l.v << n}
			}
			return cval{known: true, unsigned: true, v: l.v >> n}
		}
		x := int64(l.v)
		if x < 0 {
			return unknownVal
		}
		if op == ">>" {
			return signedVal(x >> n)
		}
		if n > 0 && bits.LeadingZeros64(uint64(x)) <= int(n) {
			return unknownVal // overflow
		}
		return signedVal(x << n)
	}
	if l.unsigned || r.unsigned {
		a, b := l.v, r.v
		res := func(v uint64) cval { return cval{known: true, unsigned: true, v: v} }
		switch op {
		case "*":
			return res(a * b)
		case "/", "%":
			if b == 0 {
				return unknownVal
			}
			if op == "/" {
				return res(a / b)
			}
			return res(a % b)
		case "+":
			return res(a + b)
		case "-":
			return res(a - b)
		}
		return compareOrBits(op, a, b, res)
	}
	a, b := int64(l.v), int64(r.v)
	switch op {
	case "*":
		if a != 0 && b != 0 {
			p := a * b
			if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
				return unknownVal
			}
			return signedVal(p)
		}
		return signedVal(0)
	case "/", "%":
		if b == 0 || a == math.MinInt64 && b == -1 {
			return unknownVal
		}
		if op == "/" {
			return signedVal(a / b)
		}
		return signedVal(a % b)
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return unknownVal
		}
		return signedVal(s)
	case "-":
		d := a - b
		if (d < a) != (b > 0) {
			return unknownVal
		}
		return signedVal(d)
	}
	return compareOrBits(op, a, b, signedVal)
}

// compareOrBits is a comparison or bitwise op of a and b, both of one
// signedness, whose bitwise results mk makes; unknown for any other op.
func compareOrBits[T int64 | uint64](op string, a, b T, mk func(T) cval) cval {
	switch op {
	case "<":
		return boolVal(a < b)
	case ">":
		return boolVal(a > b)
	case "<=":
		return boolVal(a <= b)
	case ">=":
		return boolVal(a >= b)
	case "==":
		return boolVal(a == b)
	case "!=":
		return boolVal(a != b)
	case "&":
		return mk(a & b)
	case "^":
		return mk(a ^ b)
	case "|":
		return mk(a | b)
	}
	return unknownVal
}
