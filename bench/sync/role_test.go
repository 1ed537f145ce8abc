package main

import (
	"os"
	"testing"

	"github.com/vgpud/vgpud/worker/child"
)

// TestMain enters the role the worker pool names when it starts this test
// binary as a worker or an executor (child.EnterRole), and otherwise runs
// the tests.
func TestMain(m *testing.M) {
	child.EnterRole()
	os.Exit(m.Run())
}
