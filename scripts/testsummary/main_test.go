package main

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	const pass = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
`
	const skip = `{"Action":"run","Package":"q","Test":"TestB"}
{"Action":"output","Package":"q","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"q","Test":"TestB","Output":"    b_test.go:9: no Xen headers\n"}
{"Action":"output","Package":"q","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"q","Test":"TestB"}
`
	const fail = `{"Action":"run","Package":"r","Test":"TestC"}
{"Action":"output","Package":"r","Test":"TestC","Output":"    c_test.go:3: got 1, want 2\n"}
{"Action":"output","Package":"r","Test":"TestC","Output":"--- FAIL: TestC (0.00s)\n"}
{"Action":"fail","Package":"r","Test":"TestC"}
{"Action":"output","Package":"r","Output":"FAIL\tr\t0.01s\n"}
{"Action":"fail","Package":"r"}
`
	tests := []struct {
		name, in string
		noSkips  bool
		wantOK   bool
		want     []string
		notWant  []string
	}{
		{"pass", pass, true, true, []string{"ok  \tp"}, []string{"=== RUN", "PASS\n"}},
		{"skip-allowed", pass + skip, false, true, []string{"1 tests skipped", "SKIP q TestB: b_test.go:9: no Xen headers"}, nil},
		{"skip-refused", pass + skip, true, false, []string{"a skipped test fails this run"}, nil},
		{"fail", pass + fail, false, false, []string{"got 1, want 2", "--- FAIL: TestC", "FAIL\tr"}, nil},
		{"plain-text", "# p\nsyntax error\n", false, true, []string{"syntax error"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			ok, err := summarize(strings.NewReader(tt.in), &out, tt.noSkips)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK {
				t.Errorf("summarize = %v, want %v; output:\n%s", ok, tt.wantOK, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
}
