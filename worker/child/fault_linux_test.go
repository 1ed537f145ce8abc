package child

import "testing"

// TestFaultEnvIsEnvWorker: the C constructor of fault_linux.go spells the
// worker's environment variable itself; it must be EnvWorker.
func TestFaultEnvIsEnvWorker(t *testing.T) {
	if faultEnv != EnvWorker {
		t.Errorf("faultEnv = %q, want EnvWorker %q", faultEnv, EnvWorker)
	}
}
