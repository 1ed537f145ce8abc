package addrspacetest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Children lists process pid's children (every thread's: a child stays
// listed under its thread group when the thread that forked it exits).
func Children(pid int) []int {
	var out []int
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(w); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// NewPIDs returns the pids in after and not in before.
func NewPIDs(before, after []int) []int {
	var out []int
	for _, p := range after {
		if !slices.Contains(before, p) {
			out = append(out, p)
		}
	}
	return out
}

// ReadableRanges lists process pid's readable mappings as (start,
// length) pairs of little-endian u64s, as a kernel that scans memory
// takes them, with their total length. [vvar], [vsyscall] and device
// mappings, which fault when read, are left out.
func ReadableRanges(t testing.TB, pid int) ([]byte, uint64) {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	var total uint64
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[1][0] != 'r' || (len(f) >= 6 && (strings.HasPrefix(f[5], "[v") || strings.HasPrefix(f[5], "/dev/"))) {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = binary.LittleEndian.AppendUint64(out, start)
		out = binary.LittleEndian.AppendUint64(out, end-start)
		total += end - start
	}
	if len(out) == 0 {
		t.Fatalf("no readable mapping in /proc/%d/maps", pid)
	}
	return out, total
}
