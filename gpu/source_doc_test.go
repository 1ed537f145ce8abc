package gpu

import (
	"errors"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// abiSection returns docs/ABI.md's "Program source and build options".
func abiSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/ABI.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Program source and build options")
	if i < 0 {
		t.Fatal("docs/ABI.md has no section \"Program source and build options\"")
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	return s
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// docList returns the backticked words after "label:" in the section's
// table.
func docList(t *testing.T, sec, label string) []string {
	t.Helper()
	for _, line := range strings.Split(sec, "\n") {
		_, rest, ok := strings.Cut(line, "| "+label+": ")
		if !ok {
			continue
		}
		var out []string
		for _, m := range codeSpan.FindAllStringSubmatch(rest, -1) {
			out = append(out, m[1])
		}
		return out
	}
	t.Fatalf("docs/ABI.md lists no %q", label)
	return nil
}

// TestSourceRulesMatchABI keeps docs/ABI.md "Program source and build
// options" and CheckSource in agreement: the allow-lists and ban-lists
// are the code's, and every example is accepted or refused as the
// document says.
func TestSourceRulesMatchABI(t *testing.T) {
	sec := abiSection(t)
	var dirs []string
	for _, d := range docList(t, sec, "directives") {
		dirs = append(dirs, strings.TrimPrefix(d, "#"))
	}
	for _, c := range []struct {
		label string
		doc   []string
		code  map[string]bool
	}{
		{"directives", dirs, allowedDirectives},
		{"pragmas", docList(t, sec, "pragmas"), allowedPragmas},
		{"clang pragmas", docList(t, sec, "clang pragmas"), allowedClangPragmas},
		{"identifiers", docList(t, sec, "identifiers"), bannedIdentifiers},
		{"asm and clock", docList(t, sec, "asm and clock"), map[string]bool{}},
	} {
		if c.label == "asm and clock" {
			for id := range unpastableIdentifiers {
				c.code[id] = true
			}
		}
		doc, code := slices.Sorted(slices.Values(c.doc)), slices.Sorted(maps.Keys(c.code))
		if !slices.Equal(doc, code) {
			t.Errorf("%s: docs/ABI.md lists %q, gpu/source.go %q", c.label, doc, code)
		}
	}
	for _, std := range docList(t, sec, "cl-std") {
		if err := checkOptions(std); err != nil {
			t.Errorf("documented option %s refused: %v", std, err)
		}
	}
	for _, std := range []string{"-cl-std=CLC++", "-cl-std=CL2.1", "-cl-std=CL1.3", "-cl-std=c++"} {
		if checkOptions(std) == nil {
			t.Errorf("option %s accepted but not documented", std)
		}
	}

	for _, want := range []string{"accepted", "refused"} {
		rows := examples(t, sec, want)
		if len(rows) == 0 {
			t.Fatalf("docs/ABI.md has no %s examples", want)
		}
		for _, ex := range rows {
			err := CheckSource(ex[0], ex[1])
			switch {
			case want == "accepted" && err != nil:
				t.Errorf("documented as accepted: %q | %q: %v", ex[0], ex[1], err)
			case want == "refused" && !errors.Is(err, ErrSourceRejected):
				t.Errorf("documented as refused: %q | %q: %v", ex[0], ex[1], err)
			}
		}
	}
}

// examples returns the rows of the table headed "| kind |": source and
// options (after " \| " in the row), with " + newline + " joining pieces.
func examples(t *testing.T, sec, kind string) [][2]string {
	t.Helper()
	_, rest, ok := strings.Cut(sec, "\n| "+kind+" |\n|---|\n")
	if !ok {
		return nil
	}
	var out [][2]string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		row := strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |")
		var text strings.Builder
		for i, piece := range strings.Split(row, " + newline + ") {
			if i > 0 {
				text.WriteByte('\n')
			}
			m := codeSpan.FindStringSubmatch(piece)
			if m == nil {
				t.Fatalf("example row %q: no code span", line)
			}
			text.WriteString(m[1])
		}
		src, opts, _ := strings.Cut(text.String(), ` \| `)
		out = append(out, [2]string{strings.ReplaceAll(src, `\|`, "|"), opts})
	}
	return out
}
