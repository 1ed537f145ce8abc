// Package metrics exports vgpud's live counters in the Prometheus text
// format: per physical device (scheduling policy, time held, turns,
// instances) and per vGPU instance (commands, errors by status code,
// bytes copied each way, launches, kernel time, device time charged by
// the scheduler, queue wait, share, memory). Every value is read from the
// manager at scrape time; the package keeps no state of its own.
//
// It knows the manager's and the aggregator's read-only API, nothing of
// transports, registers or commands.
package metrics
