//go:build !linux

package sandbox

// CloseInheritedOnExec does nothing here: there are no workers to
// confine.
func CloseInheritedOnExec() error { return nil }
