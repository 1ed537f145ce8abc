package agentchan

import "unsafe"

// uintptrOf returns a NUL-terminated copy of s for prctl.
func uintptrOf(s string) uintptr {
	b := append([]byte(s), 0)
	return uintptr(unsafe.Pointer(&b[0]))
}
