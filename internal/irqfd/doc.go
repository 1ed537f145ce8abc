// Package irqfd takes interrupt eventfds from a transport's peer (QEMU's
// SET_IRQFD, a vfio-user client's SET_IRQS) without letting the peer
// block vgpud through them.
//
// Check and Prepare refuse any fd that is not an eventfd: a pipe, a
// socket or a file can be made to block a write forever. A Trigger owns
// an interrupt eventfd and writes to it from a goroutine of its own, never
// in the caller's goroutine and never under the caller's locks: Signal
// only counts and wakes the writer, and an eventfd whose counter is full
// (the interrupt is pending anyway) drops the write instead of blocking.
// Close never waits for a write in progress. Drain reads a counter
// without ever blocking (preadv2 with RWF_NOWAIT). A Watcher calls a
// function on each signal of a peer's eventfd (a kick ioeventfd, an
// unmask or resample eventfd), waiting in the runtime's poller rather
// than in a blocking system call, whose P the goroutine it wakes would
// wait for.
//
// Package worker uses it for the eventfds it shares with a worker
// process, an untrusted peer in the same way: the instance's doorbell is
// a Trigger, and its reads of both eventfds are Drains.
package irqfd
