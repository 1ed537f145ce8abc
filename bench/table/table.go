// Package table prints the result tables of vgpud's benchmark programs: a
// title, a header, rows whose first column (the configuration) is
// left-aligned and whose figures are right-aligned, and notes below. It
// knows nothing of what is measured.
package table

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Table is one printed result.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Note appends a formatted note printed under the table.
func (t *Table) Note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// Print writes the table to w.
func (t *Table) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n", t.Title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := 0
	for _, r := range append([][]string{t.Header}, t.Rows...) {
		if len(r) > 0 {
			width = max(width, len(r[0]))
		}
	}
	line := func(cells []string) {
		if len(cells) == 0 {
			return
		}
		first := cells[0] + strings.Repeat(" ", width-len(cells[0]))
		fmt.Fprintf(tw, "%s\t%s\t\n", first, strings.Join(cells[1:], "\t"))
	}
	line(t.Header)
	for _, r := range t.Rows {
		line(r)
	}
	tw.Flush()
	if len(t.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
