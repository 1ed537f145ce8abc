// Package driver is the guest-side driver library for the vgpud virtual GPU.
//
// It owns the guest's view of one vGPU: the command ring and completion
// records in guest RAM, the DMA staging pool, scatter-gather lists, handle
// allocation for buffers and programs, batching (one doorbell per batch),
// waiting for completions and fences by polling guest RAM, and turning
// per-command completion statuses into errors (*CommandError).
//
// It works against two small interfaces (hw.go): Registers for BAR0 and
// Memory for DMA-able pages. In a Linux guest they are provided by OpenPCI
// (mmap of the BAR through sysfs) and NewPagemapMemory (mlocked pages whose
// guest-physical addresses come from /proc/self/pagemap); in tests they are
// provided by an in-process harness (see package drivertest). The same code
// runs in both.
//
// The driver knows only the guest-visible ABI (package abi). It must not know
// anything of dom0: transports, the aggregator, the physical device.
//
// # Performance rules
//
// Every trapped MMIO access costs tens of microseconds under TCG, so the hot
// path never reads a register: commands are written into ring slots and the
// doorbell (abi.RegRingTail, or the kick with the tail in its shadow) is
// written only by Flush, by a wait, or when the ring is full, and not at all
// while the device says in the poll word that it polls the shadow (ABI
// 1.6); completion records and fence values are polled in guest RAM. Registers are read at Open and when reporting a failure.
//
// # Memory
//
// No guest-physical contiguity is assumed beyond one page. Bulk data goes
// through a staging pool of pages (Options.StagingBytes); copies larger than
// half the pool are streamed through it in chunks, each chunk a separate
// copy command with its own scatter-gather list (chained tables when it has
// more than 256 entries). Staging pages of a command are reused once its
// completion record has been seen. WriteFrom and ReadInto stage nothing:
// a copy from or into DMA memory is one command, however long, unless its
// scatter-gather entries outgrow half the pool as tables (dmacopy.go).
//
// # Errors
//
// Asynchronous commands (CreateBuffer, Free, Write, Launch, FreeProgram,
// CopyBuffer, FillBuffer) are batched: their device status is checked when
// their completion is reaped, and the first failure is returned by the next
// Finish (or Sync) as a *CommandError naming the command's index, opcode and
// tag; CopyBuffer and FillBuffer given a done callback leave their status to
// it instead. Synchronous calls (Read, Build, ProgramInfo, DeviceInfo,
// WaitIndex) return their own command's failure. The ABI 1.4 commands
// (copyfill.go) fail with ErrUnsupported on an older device.
// abi.StatusOf(err) recovers the device status from any of them.
//
// Tracked commands (tracked.go: CreateBufferNotify, WriteNotify, ReadAsync,
// LaunchNotify, FreeNotify, FreeProgramNotify, Marker) hand their
// completion to a callback that owns the status, for a caller that serves
// several clients on one device (vgpu-icdd); Reap collects what has landed
// without waiting.
//
// # Device lost
//
// When the instance's device context is lost (docs/ABI.md "Device lost":
// vgpud's worker process ended) the device never completes what is in its
// ring. A wait, Reap or CheckLost that finds RegError reading
// StatusDeviceLost fails every command in flight as if it had completed
// with that status (callbacks included), and every later call fails with
// ErrDeviceLost until Reopen resets the device and sets its ring up again.
//
// # Interrupts
//
// Waits poll guest RAM; where the VMM delivers the vGPU's INTx (ABI 1.1), a
// waiter may sleep on it instead: UIOBlocker for one waiter, Interrupts
// (interrupts.go) to hand each interrupt to every reaper of a daemon that
// serves many (vgpu-icdd), armed only on request. Both reach the line
// through uio_pci_generic in a guest; IRQLine is the seam tests fill.
//
// A Device is safe for concurrent use; its methods serialise on one mutex.
package driver
