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
