// Package transporttest is the one conformance suite every transport's
// tests run (Run): config space and BAR sizing, the registers, the guest
// driver suite over the transport with the value doorbell and the kick,
// DMA bounds, INTx, reset, hang-up and reconnect, and the transport's own
// hostile peers while a neighbour instance computes. A transport takes
// part by giving a test client that plays its hypervisor's side (Guest)
// and its attacks (Transport, Attack).
//
// It owns only the suite and, for the transports' own unit tests, the
// smallest register-file backend (FakeBackend). It knows no protocol (each transport's test
// package brings its client) and drives instances through mdev's exported
// API, so mdev's own tests must not import it.
package transporttest
