// Package devmem is the main process's ledger of one physical device's
// memory (docs/overcommit.md): how much the device can hold, how much each
// instance holds on it, and who waits for room.
//
// Workers account for their instances' buffers against the instance's
// quota (the profile's advertised memory, which may be larger than the
// device); the ledger is what keeps the sum of all instances, across trust
// domains and worker processes, within the device. A worker reserves
// before it allocates and releases after it frees (worker protocol
// Reserve/Unreserve); the pool forgets an instance's holdings when its
// device state goes (removed, moved, or its worker ended).
//
// The ledger knows nothing of instances beyond their ids, of policies or
// of processes: what to do when a reservation does not fit (wait, move
// the instance, suspend it) is its callers' decision.
package devmem
