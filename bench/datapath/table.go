package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
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
	line := func(cells []string) {
		// Right-aligned numbers; the first column (the path) reads better
		// left-aligned, so pad it by hand.
		fmt.Fprintf(tw, "%s\t%s\t\n", padRight(cells[0], t.firstWidth()), strings.Join(cells[1:], "\t"))
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

func (t *table) firstWidth() int {
	n := len(t.header[0])
	for _, r := range t.rows {
		n = max(n, len(r[0]))
	}
	return n
}

func padRight(s string, n int) string { return s + strings.Repeat(" ", max(0, n-len(s))) }

// Cell formats. A missing value prints as "-".
const missing = "-"

func nsCell(ns float64) string {
	if ns <= 0 {
		return missing
	}
	return fmt.Sprintf("%.0f", ns)
}

func ratioCell(x, base float64) string {
	if x <= 0 || base <= 0 {
		return missing
	}
	return fmt.Sprintf("%.2fx", x/base)
}

func msCell(d time.Duration) string {
	if d <= 0 {
		return missing
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
