package floors

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module path: package paths in the list are relative to it.
const module = "github.com/vgpud/vgpud/"

// floorLine is a floor in docs/architecture.md's "Floors": "- **N name**:"
// then its packages in backquotes, on this line and the indented ones
// after it; a backquoted name in parentheses is a note, not a package.
var (
	floorLine = regexp.MustCompile(`^- \*\*(\d+) [^*]+\*\*:(.*)$`)
	named     = regexp.MustCompile("`([a-z0-9_/.]+)`")
	note      = regexp.MustCompile(`\([^)]*\)`)
)

// floorMap is the list: each package name or "prefix/..." pattern and its
// floor.
type floorMap map[string]int

// floorOf returns the floor of package pkg (relative to the module): its
// own name's, or else the longest pattern's that covers it.
func (m floorMap) floorOf(pkg string) (int, bool) {
	if f, ok := m[pkg]; ok {
		return f, true
	}
	best, floor := "", 0
	for name, f := range m {
		prefix, ok := strings.CutSuffix(name, "/...")
		if ok && (pkg == prefix || strings.HasPrefix(pkg, prefix+"/")) && len(prefix) > len(best) {
			best, floor = prefix, f
		}
	}
	return floor, best != ""
}

// readFloors parses the "Floors" section of docs/architecture.md.
func readFloors(t *testing.T, root string) floorMap {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Each floor's text, its continuation lines joined: a note in
	// parentheses may span lines.
	text := map[int]string{}
	in, floor := false, -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in, floor = line == "## Floors", -1
			continue
		}
		switch g := floorLine.FindStringSubmatch(line); {
		case !in:
		case g != nil:
			floor, _ = strconv.Atoi(g[1])
			if _, dup := text[floor]; dup {
				t.Errorf("docs/architecture.md: floor %d twice", floor)
			}
			text[floor] = g[2]
		case floor >= 0 && strings.HasPrefix(line, "  "):
			text[floor] += " " + line
		default:
			floor = -1
		}
	}
	m := floorMap{}
	for floor, txt := range text {
		for _, g := range named.FindAllStringSubmatch(note.ReplaceAllString(txt, ""), -1) {
			if prev, dup := m[g[1]]; dup {
				t.Errorf("docs/architecture.md: %s is on floors %d and %d", g[1], prev, floor)
			}
			m[g[1]] = floor
		}
	}
	if len(m) == 0 {
		t.Fatal(`docs/architecture.md has no "Floors" list`)
	}
	return m
}

// packages lists the module's packages and the module packages each
// imports (not its tests').
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		var own []string
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				own = append(own, rel)
			}
		}
		pkgs[strings.TrimPrefix(f[0], module)] = own
	}
	return pkgs
}

// TestFloors: docs/architecture.md's floors against the tree.
func TestFloors(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	floors := readFloors(t, root)
	pkgs := packages(t, root)
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		f, ok := floors.floorOf(p)
		if !ok {
			t.Errorf("package %s is on no floor of docs/architecture.md", p)
			continue
		}
		for _, imp := range pkgs[p] {
			if g, ok := floors.floorOf(imp); ok && g > f {
				t.Errorf("%s (floor %d) imports %s, on floor %d above it", p, f, imp, g)
			}
		}
	}
	for name := range floors {
		prefix, pattern := strings.CutSuffix(name, "/...")
		if !slices.ContainsFunc(names, func(p string) bool {
			return p == prefix || pattern && strings.HasPrefix(p, prefix+"/")
		}) {
			t.Errorf("docs/architecture.md's floors name %s, which is no package", name)
		}
	}
	if testing.Verbose() {
		fmt.Printf("%d packages on %d names\n", len(names), len(floors))
	}
}
