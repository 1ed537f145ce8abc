package worker

import (
	"os/exec"
	"testing"

	"github.com/vgpud/vgpud/worker/child"
)

// TestExitCause: how a worker's unrequested end is counted, from real
// processes' exits.
func TestExitCause(t *testing.T) {
	for _, c := range []struct {
		script, want string
	}{
		{"exit 1", CauseExit},
		{"exit 0", CauseExit},
		{"exit 3", CauseContextLost},
		{"kill -SEGV $$", CauseSignal},
	} {
		err := exec.Command("sh", "-c", c.script).Run()
		if got := exitCause(err); got != c.want {
			t.Errorf("exitCause(%q: %v) = %s, want %s", c.script, err, got, c.want)
		}
	}
	if child.ExitContextLost != 3 {
		t.Errorf("child.ExitContextLost = %d, the test's script exits 3", child.ExitContextLost)
	}
}
