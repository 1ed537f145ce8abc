//go:build !linux

package sandbox

import (
	"os"
	"os/exec"
)

// DefaultPolicy is an empty policy: there is no sandbox here.
func DefaultPolicy(writeDir string) Policy { return Policy{Private: writeDir} }

// PolicyFor is DefaultPolicy: the platforms change nothing here.
func PolicyFor(writeDir string, _ []Platform, _ error) Policy { return DefaultPolicy(writeDir) }

// EnterProbe does nothing: there is no probe here.
func EnterProbe() {}

// Probe reports that nothing is available.
func Probe() Report {
	return Report{UID: os.Getuid(), GID: os.Getgid(), Weak: []string{ErrUnsupported.Error()}}
}

// Apply puts the policy in cmd's environment and changes nothing else.
func (p Policy) Apply(cmd *exec.Cmd) error {
	kv, err := p.env()
	if err != nil {
		return err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, kv)
	return nil
}

// PrepareDir does nothing.
func PrepareDir(string) error { return nil }

// SetDataLimit fails: there are no limits to set.
func SetDataLimit(int, uint64) error { return ErrUnsupported }

// Enter confines nothing: it fails unless p is Off.
func Enter(p Policy) (Report, error) {
	if p.Off {
		return Report{Weak: []string{"sandbox off: this worker runs unconfined"}}, nil
	}
	return Report{}, ErrUnsupported
}

// PrivateDir is hostDir: there is no file view.
func PrivateDir(_ int, hostDir string) string { return hostDir }

// ConfineExecutor fails unless p is Off: there is no sandbox here.
func ConfineExecutor(p Policy) error {
	if p.Off {
		return nil
	}
	return ErrUnsupported
}

// SetDataBound fails: there are no limits to set.
func SetDataBound(int, uint64) error { return ErrUnsupported }
