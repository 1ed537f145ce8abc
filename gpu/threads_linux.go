//go:build cgo

package gpu

/*
#define _GNU_SOURCE
#include <pthread.h>
#include <errno.h>

// vg_default_guard sets the guard region of threads made with default
// attributes from now on; 0 or an errno value.
static int vg_default_guard(size_t bytes) {
	pthread_attr_t a;
	int err = pthread_getattr_default_np(&a);
	if (err != 0) {
		return err;
	}
	err = pthread_attr_setguardsize(&a, bytes);
	if (err == 0) {
		err = pthread_setattr_default_np(&a);
	}
	pthread_attr_destroy(&a);
	return err;
}
*/
import "C"

import (
	"fmt"
	"syscall"
)

// GuardRuntimeThreads gives every thread this process makes with default
// attributes from now on a guard region of bytes below its stack
// (pthread_setattr_default_np): inaccessible address space, no memory,
// and not counted by RLIMIT_DATA. OpenCL runtimes make their threads so
// (PoCL's CPU devices run every work-item on one), and a kernel's private
// arrays live on those stacks: a kernel whose arrays pass its thread's
// stack by less than the guard faults (its executor dies, its context is
// lost), where with glibc's one-page guard its stores could land in a
// mapping below, such as a malloc arena of the same process, and the
// kernel would run on with that process's memory corrupted. Call it before
// the first Open. Go's own threads are unaffected (cgo sets their
// attributes). Where cgo is off it does nothing.
func GuardRuntimeThreads(bytes uint64) error {
	if err := C.vg_default_guard(C.size_t(bytes)); err != 0 {
		return fmt.Errorf("gpu: guard region of %d bytes for the runtime's threads: %w", bytes, syscall.Errno(err))
	}
	return nil
}
