// Package sched is a physical device's turn arbiter: which vGPU instance
// gets the device next, under a policy (best-effort, equal-share,
// fixed-share, the timeslice baseline), accounted in measured device time
// (docs/scheduler.md). A Scheduler grants one turn at a time; a client is
// an instance, named by its id; a turn carries the slice budget of the
// moment (how long a slice of a long launch may hold the device); a turn
// that has run its client's slice while another group's client waits is
// preempted through a Preempter (stopped and resumed later, or left to
// the device's time-slicing) and the device granted on; a watchdog
// reports a turn whose running time outlives its client's kernel limit;
// a free device is parked at the client whose turn ended last, when it
// runs alone, for its holder to take without asking (offer.go).
//
// sched owns the policies' state machine (schedCore: pure, time passed in,
// property-tested) and its synchronisation (Scheduler). It knows nothing of
// OpenCL, commands, instances' state or processes: the aggregator asks for
// turns through its Arbiter interface, which Scheduler satisfies, in vgpud's
// main process; a worker process asks across its protocol, and the main
// process asks the Scheduler on its behalf.
//
// Lock order: the Preempter and the continue functions it returns, and
// the Offers hook, run under Scheduler.mu and must not call the Scheduler (worker.Pool's take
// only the pool's, an instance's and a process's locks, which it never
// holds while calling the Scheduler); the onOverrun callback runs without
// it.
package sched
