// Package sched is a physical device's turn arbiter: which vGPU instance
// gets the device next, under a policy (best-effort, equal-share,
// fixed-share, the timeslice baseline), accounted in measured device time
// (docs/scheduler.md). A Scheduler grants one turn at a time; a client is
// an instance, named by its id; a turn carries the slice budget of the
// moment (how long a slice of a long launch may hold the device), and a
// watchdog reports a turn that outlives its client's limit.
//
// sched owns the policies' state machine (schedCore: pure, time passed in,
// property-tested) and its synchronisation (Scheduler). It knows nothing of
// OpenCL, commands, instances' state or processes: the aggregator asks for
// turns through its Arbiter interface, which Scheduler satisfies, in vgpud's
// main process; a worker process asks across its protocol, and the main
// process asks the Scheduler on its behalf.
//
// Lock order: Scheduler.mu is a leaf; the onOverrun callback runs without
// it.
package sched
