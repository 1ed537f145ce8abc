// Package fdtest counts a test process's open file descriptors, so that
// tests can tell that what they handed a function (a descriptor passed
// with a message, a connection) was closed, not leaked.
package fdtest

import (
	"os"
	"testing"
)

// Open returns how many file descriptors this process has open now.
func Open(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("open descriptors: %v", err)
	}
	return len(ents)
}
