// Command testsummary reads `go test -json` output and prints what a
// plain `go test` run prints (each package's closing line, the output of
// every failed test, build errors), then every skipped test with its
// reason. With -no-skips a skipped test fails the run: in CI every test
// must run, since `make test` installs everything the tests need.
//
// Usage: go test -json ./... > test.json; go run ./scripts/testsummary -no-skips test.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output events
	FailedBuild string
}

type testKey struct{ pkg, test string }

func main() {
	noSkips := flag.Bool("no-skips", false, "fail when a test was skipped")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testsummary [-no-skips] FILE.json")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	defer f.Close()
	ok, err := summarize(f, os.Stdout, *noSkips)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// summarize prints the summary of the events in r to w and reports
// whether the run passed (no failure, and no skip when noSkips).
func summarize(r io.Reader, w io.Writer, noSkips bool) (bool, error) {
	out := map[testKey]*strings.Builder{}
	var skipped []string
	failed := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// go test prints some errors (a package that does not
			// build at all) as plain text.
			fmt.Fprintln(w, string(line))
			continue
		}
		k := testKey{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				// Package-level lines: the closing "ok"/"FAIL" line and
				// what a test binary printed outside any test.
				if !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS\n") {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			b := out[k]
			if b == nil {
				b = &strings.Builder{}
				out[k] = b
			}
			b.WriteString(e.Output)
		case "fail":
			failed = true
			if e.Test != "" && out[k] != nil {
				fmt.Fprint(w, out[k].String())
			}
			delete(out, k)
		case "skip":
			if e.Test != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, skipReason(out[k])))
			}
			delete(out, k)
		case "pass":
			delete(out, k)
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read test events: %w", err)
	}
	if len(skipped) > 0 {
		sort.Strings(skipped)
		fmt.Fprintf(w, "%d tests skipped:\n", len(skipped))
		for _, s := range skipped {
			fmt.Fprintln(w, "  SKIP", s)
		}
		if noSkips {
			fmt.Fprintln(w, "a skipped test fails this run: make test installs everything the tests need, so a skip hides a test that no longer runs")
			failed = true
		}
	}
	return !failed, nil
}

// skipReason is the last line a skipped test logged (its t.Skip message).
func skipReason(b *strings.Builder) string {
	if b == nil {
		return "(no reason given)"
	}
	var last string
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- SKIP") {
			last = l
		}
	}
	if last == "" {
		return "(no reason given)"
	}
	return last
}
