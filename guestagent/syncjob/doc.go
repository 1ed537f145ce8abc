// Package syncjob is the wire format between the guest program vgpu-sync
// (the NAMD-like sync workload) and bench/sync, which reads its console:
// defined once so the two cannot drift. It lives with the guest side so
// that guest programs import nothing from bench/; plain Go (no cgo), so
// the static guest binary imports it too, and it imports no vgpud package.
package syncjob
