// Package irqfdtest holds test helpers for hostile interrupt and eventfd
// peers: a QEMU, a vfio-user client or a worker process that hands vgpud
// a pipe instead of an eventfd (FullPipe), or an eventfd it made blocking
// with its counter full (Eventfd, Add, CounterMax), and how long a test
// waits for what takes microseconds before it calls it blocked
// (Patience).
//
// It imports nothing of vgpud, irqfd included, so that irqfd's own
// internal tests can use it as well as the transports' and the worker's.
package irqfdtest
