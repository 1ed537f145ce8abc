// Package aggregator turns a guest's command ring into work on a physical
// device. It owns, per vGPU instance, everything the instance is: the ring
// position, the latched device error, the handle tables of buffers and
// programs with their memory quota, the lengths of its kernels and
// copies, and the counters. Device turns come from an Arbiter (the
// device's scheduler, package sched, which the aggregator does not import).
//
// A doorbell only publishes a new producer index and wakes the instance's
// worker goroutine, so the transport thread (and the guest vCPU waiting on
// it) never waits for device work. The worker fetches each 64-byte command
// from guest RAM, decodes it with package abi, executes it through gpu.Queue
// and writes the completion record (seq last) back into guest RAM, in ring
// order. A run of commands the guest queued together shares one device
// turn (turns.go), and its launches are enqueued on a gpu.Pipeliner queue
// and waited for together before their records are written (pipeline.go).
// A copy moves long runs of guest RAM straight, and streams the rest
// through the queue's pinned staging memory where the queue streams
// (gpu.Streamer: a GPU's; exec.go, stager), or is memory copies into and
// out of a CPU device's host-backed buffers (moveInPlace).
// Every guest-supplied address, handle, size and string is checked
// here; a bad command completes with an error status and touches nothing
// else.
//
// The aggregator knows nothing of transports, PCI or registers: guest RAM
// reaches it through the GuestMemory interface that each transport
// implements, and package mmio drives an Instance through its exported
// methods. It does not import mmio or mdev.
//
// Lock order: Instance.mu is never held while calling into gpu or
// GuestMemory and never while waiting for a device turn. The worker owns
// the handle tables (state) alone; other goroutines reach them only through
// requests the worker serves.
package aggregator
