package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// table is one printed result: a title, a header row, rows and notes.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *table) print(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n", t.title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len(t.header[0])
	for _, r := range t.rows {
		width = max(width, len(r[0]))
	}
	line := func(cells []string) {
		fmt.Fprintf(tw, "%s\t%s\t\n", cells[0]+strings.Repeat(" ", width-len(cells[0])), strings.Join(cells[1:], "\t"))
	}
	line(t.header)
	for _, r := range t.rows {
		line(r)
	}
	tw.Flush()
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range t.notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}
