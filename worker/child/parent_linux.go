package child

import (
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
)

// setParentDeath arms (SIGKILL) or disarms the worker's parent-death
// signal (wire.Parent). The kernel keeps it per thread and sends it for
// the thread the process started on (exec.Cmd's Pdeathsig set it there):
// call it on that thread.
func setParentDeath(arm bool) error {
	sig := 0
	if arm {
		sig = int(unix.SIGKILL)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0); err != nil {
		return abi.Errorf(abi.StatusInternal, "parent-death signal: %v", err)
	}
	return nil
}
