package addrspacetest

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// VMSize returns this process's address-space size (VmSize in
// /proc/self/status), in bytes.
func VMSize(t testing.TB) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmSize %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmSize in /proc/self/status (%v)", sc.Err())
	return 0
}
