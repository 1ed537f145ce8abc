package table

import (
	"strings"
	"testing"
)

func TestPrint(t *testing.T) {
	tb := &Table{Title: "T", Header: []string{"path", "ns/op"}}
	tb.Add("a long path name", "12")
	tb.Add("b", "3456")
	tb.Note("n=%d", 2)
	var sb strings.Builder
	tb.Print(&sb)
	want := `
T

  path              ns/op
  a long path name     12
  b                  3456

  n=2
`
	if got := sb.String(); got != want {
		t.Errorf("Print() =\n%q\nwant\n%q", got, want)
	}
}

func TestParseSections(t *testing.T) {
	all := []string{"a", "b", "c"}
	got, err := ParseSections("c, a,c", all)
	if err != nil || strings.Join(got, ",") != "c,a" {
		t.Errorf("ParseSections = %q, %v, want [c a]", got, err)
	}
	if _, err := ParseSections("a,x", all); err == nil {
		t.Errorf("ParseSections(unknown) = nil error")
	}
}
