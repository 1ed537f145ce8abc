//go:build !linux

package driver

import "time"

// preciseSleep sleeps for about d.
func preciseSleep(d time.Duration) { time.Sleep(d) }
