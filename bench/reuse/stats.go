package main

import (
	"fmt"
	"syscall"
	"time"
)

// jobTime is one job's cost: wall time, and the CPU time of the whole
// process meanwhile (every thread: vgpud's goroutines and PoCL's kernel
// threads), which other load on the machine disturbs less than wall time.
type jobTime struct {
	wall, cpu time.Duration
}

// processCPU returns the CPU time (user + system) the process has used.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
