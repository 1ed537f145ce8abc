// Package addrspacetest measures a test process's address space
// (VmSize), so that a test can tell a map of a guest RAM window from a
// map of the whole sparse memfd behind it; and reads other processes'
// (children, readable mappings), for the tests that look for a
// worker's executors and scan their memory.
//
// It imports nothing of vgpud, guestmem included, so that guestmem's own
// internal tests can use it (guestmemtest imports guestmem).
package addrspacetest
