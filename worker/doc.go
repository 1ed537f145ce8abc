// Package worker runs the device work of vgpud's vGPU instances in worker
// processes, one per (trust domain, physical device), and is the main
// process's side of the worker protocol (package wire; docs/worker.md,
// docs/isolation.md).
//
// A trust domain is a reuse domain: an instance's private one by default,
// or an operator-named one shared by one tenant's instances. Everything
// that runs guest-supplied code or holds guest data on the device for a
// domain (OpenCL context, compiler, kernels, buffers, the domain's reuse
// table) lives in its worker (package child, started by executing this
// program again); the main process keeps transports, register files,
// control, metrics and the devices' schedulers (package sched), and never
// compiles or runs guest code.
//
// The Pool starts a worker on its domain's first instance and stops it
// after the last; it answers each worker's turn requests from the device's
// scheduler and bounds every turn (the scheduler's watchdog, on its
// running time) and every build (a timer); on a CPU device it stops a
// worker whose turn the scheduler preempts and continues it when the turn
// resumes (preempt.go): a worker that overruns, breaks the protocol or dies is
// ended, its instances lose their device context (abi.StatusDeviceLost),
// and each comes back on a fresh worker when its guest resets it. Other
// domains never notice. A Backend is an instance as the main process sees
// it: the register file's backend, the sink of its guest-RAM map, its
// counters in a page shared with the worker.
//
// The main process treats workers as untrusted peers: every message is
// checked (package wire), a worker may only release turns it was granted
// and answer requests that are waiting, values it wrote in shared pages
// are shown, never trusted, and it never sees another domain's memory.
//
// The Pool also keeps each device's memory ledger (package devmem,
// docs/overcommit.md): workers reserve before they allocate, and a
// reservation the device cannot hold is answered by Config.Shortage's
// plan (wait, refuse, or the instance is being moved). Relocate moves an
// instance's device state to a worker on another device, or out to this
// process's memory and back, while its VM runs.
//
// Config.InProcess runs the instances in this process instead: no
// isolation at all and no ledger, for benchmark baselines only.
//
// A transport's kick ioeventfd (vfio-user) is read by the instance's
// worker itself, or by this process while no worker can (kicks.go,
// docs/worker.md "Kicks straight to the worker").
//
// Lock order: a scheduler's (it calls the pool's Preempter holding it),
// then Pool.mu, then procInstance.bellMu, then procInstance.mu, then
// process.mu, then a ledger's; none is held while waiting for a worker's
// reply, nor while calling a scheduler. procInstance.kickMu comes before
// all of them and is the one lock held while waiting for a worker's reply
// (Kicks, StopKicks): no reply and no kick waits on it.
package worker
