package definitions

import (
	"os"
	"testing"

	"github.com/vgpud/vgpud/worker/child"
)

// TestMain: a worker or executor this test binary's pool started
// (child.EnterRole), or else the tests.
func TestMain(m *testing.M) { child.EnterRole(); os.Exit(m.Run()) }
