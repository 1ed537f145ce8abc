// Package mmiotest holds what the fake mmio.Backends of tests share:
// ErrorLatch, the error latch a register file reads, latches and
// acknowledges. It imports only abi, so that mmio's own tests can use it.
package mmiotest
