// Package icdserver is the logic of vgpu-icdd, the privileged guest daemon
// that lets unprivileged OpenCL applications use the guest's vGPUs through
// the guest OpenCL ICD (docs/icd-protocol.md).
//
// It owns, per client connection: the tables that translate the client's
// buffer, program and event ids into device handles of the devices it
// serves (so a client can only name its own objects), the client's arenas
// (memfds mapped shared, sealed against shrinking), its events with their
// timestamps, its limits, and the cleanup when the client goes away
// (wait for its commands, free its buffers and programs, unmap its arenas).
// Per served device it owns one reaper goroutine that reaps completions as
// they land, so that events are timestamped promptly; a blocking Wait
// reaps its connection's devices itself for a bounded window
// (waitpoll.go), so that a short command is answered as soon as its
// completion lands, and then sleeps until a reaper delivers the rest. Where
// the device's completion interrupts are given (Config.Interrupts), a
// reaper arms them while a wait sleeps on its device and wakes at each
// one as well as on its timers. When a
// device's context is lost (vgpud's worker ended), the driver fails the
// commands in flight, so each client's events end with StatusDeviceLost;
// the reaper then reopens the device (Server.revive), and a Hello finds a
// device lost while idle and has it reopened too. Buffers and programs of
// the lost context are stale: requests naming them end with
// StatusDeviceLost without reaching the device.
//
// It drives the devices only through guestagent/driver, using the tracked
// commands (driver/tracked.go) whose completion callbacks own their status:
// a device failure is reported to the client that caused it, in its event,
// and never to another connection. It knows the protocol through package
// icdproto, and nothing of how the devices were found (the command
// guestagent/cmd/vgpu-icdd, or a test harness, opens them), of the guest
// agent, or of dom0.
//
// # Concurrency
//
// Each connection has one goroutine that reads and executes its requests in
// order, from its submission queue (queue.go) while the queue has entries
// or its looking window lasts, and from its socket once it has said in
// the queue that it sleeps; the Server's accept loops, device reapers and its trimmer (which
// hands the memory of closed connections that held many events back to
// the kernel, debug.FreeOSMemory at most once a second) are the others. Close
// stops and waits for all of them. Completion callbacks run on whichever
// goroutine reaps (a connection's, or a reaper) with the driver's device
// mutex held, so the lock order is: driver.Device's mutex, then conn.mu,
// then nothing. A connection's goroutine never holds conn.mu while it calls
// the driver.
//
// # Hostile clients
//
// Every message is decoded by icdproto.Unmarshal and every id and arena
// range is checked against the connection's own tables; any failure is
// answered with an Error message and the connection is closed (and
// cleaned up). Nothing a client sends can panic the daemon, reach another
// connection's objects, or make another connection's commands fail.
package icdserver
