// Package pollbudget decides which waits of a poll-then-block loop poll:
// the one rule vgpud's pollers share (vgpu-icdd's blocking waits and
// submission queues, the executor's socket). A poller that looked for its
// next event for a whole window in vain Misses times in a row stops
// looking and sleeps at once, but looks again on every Probe-th wait, so
// that it notices when its events come close together again; a look that
// pays starts over. Looking costs the CPU that the peer it waits for
// needs on a small host, so it is spent only where it pays.
//
// It owns the decision only: the window, the looking and the counting
// are the poller's. It imports no other vgpud package, so guest programs
// may use it too.
package pollbudget
