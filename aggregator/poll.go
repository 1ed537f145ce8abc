package aggregator

import (
	"time"

	"golang.org/x/sys/unix"
)

// Poll-then-block (issue 42).
//
// In a worker process a doorbell reaches the instance's loop through the
// doorbell eventfd: a cross-process wake-up, then a wake-up of this
// goroutine, per doorbell. A loop that has just run out of commands is
// likely to be rung again soon (the guest waits for one command and
// sends the next), so before it blocks it looks at the instance page for
// the poll window (Shared.PollWindow, written by the main process) and
// announces it in Shared.PollUntil; the main process publishes doorbells
// without a signal meanwhile. The device turn the loop holds is kept
// while it polls, no longer than the turn's hold (turns.go), and the time
// held counts as the turn's device time: a poll window is charged like
// the turn it keeps. Enqueued launches are completed before the loop
// polls, so the guest never waits for a completion the poll holds back.
// When the window ends the loop clears PollUntil, looks once more (a
// doorbell published before the main process saw the clear was not
// signalled) and blocks; an idle instance costs no CPU after its window.

// SetPoll makes the instance's loops (its default ring's and its
// contexts') poll with poll before they block: poll applies what was
// published in the instance page without a signal (doorbells, kicks,
// context kicks, each to its ring, which wakes that ring's loop). It
// must be called before the first doorbell; nil (the default) never
// polls.
func (in *Instance) SetPoll(poll func()) {
	in.mu.Lock()
	in.poll = poll
	in.mu.Unlock()
}

// page returns the instance whose Shared is the instance page: a
// context's is its parent's.
func (in *Instance) page() *Instance {
	if in.parent != nil {
		return in.parent
	}
	return in
}

// pollable returns what a loop of in polls with: the page's poll func
// (nil: never polls), its window now, and whether in's ring is frozen
// (a migration or a move holds it: it fetches nothing, and a worker the
// instance is moving away from must leave the page's PollUntil to the
// worker it moves to).
func (in *Instance) pollable() (poll func(), window time.Duration, frozen bool) {
	p := in.page()
	p.mu.Lock()
	poll = p.poll
	p.mu.Unlock()
	in.mu.Lock()
	frozen = in.frozen
	in.mu.Unlock()
	return poll, p.sh.PollWindowNow(), frozen
}

// pollRing polls the instance page for the poll window, and reports
// whether the loop has work (a doorbell of its own ring was applied, or a
// task came and ran) rather than having to block.
func (in *Instance) pollRing() bool {
	poll, window, frozen := in.pollable()
	if poll == nil {
		return false
	}
	sh := in.page().sh
	if window <= 0 || frozen {
		// Not polling now; a PollUntil or poll word a poll of this loop
		// left (a task ended it) must not outlive it: clear them and look
		// once more.
		told := in.guestPolling(false)
		if sh.PollUntil.Load() == 0 && !told {
			return false
		}
		sh.PollUntil.Store(0)
		poll()
		return in.woken()
	}
	// Launches enqueued are completed first: the guest may be waiting
	// for them, and ring only after.
	in.syncLaunches()
	start := time.Now()
	deadline := start.Add(window)
	sh.PollUntil.Store(Monotonic() + int64(window))
	in.guestPolling(true)
	defer func() { sh.PollNanos.Add(uint64(time.Since(start))) }()
	held := start // the kept turn is charged for the polling from here
	charge := func(now time.Time) {
		if h := in.held; h != nil {
			h.dev += now.Sub(held)
		}
		held = now
	}
	for {
		poll()
		if in.woken() {
			charge(time.Now())
			return true
		}
		select {
		case t := <-in.tasks:
			charge(time.Now())
			in.runTask(t)
			return true
		default:
		}
		now := time.Now()
		if h := in.held; h != nil && (sh.TurnWanted.Load() != 0 || !in.keep(h, now)) {
			charge(now)
			in.dropTurn()
		}
		if in.ctx.Err() != nil || !now.Before(deadline) {
			charge(now)
			break
		}
		// Give the CPU to whoever is runnable (the main process with the
		// next doorbell, the guest): on a machine with few CPUs a poller
		// that only spins delays the very doorbell it waits for.
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	// The last look: after the clears, a doorbell is signalled and the
	// guest kicks.
	sh.PollUntil.Store(0)
	in.guestPolling(false)
	poll()
	return in.woken()
}

// announcePoll says in the instance page, as the loop starts on work,
// that it will look at the page again before it blocks (for a window
// from now; a longer batch's doorbells are signalled, which costs a
// wake-up, nothing else): the guest's next doorbell, rung as soon as it
// sees this batch's completions, then needs no signal, however late the
// loop comes to poll.
func (in *Instance) announcePoll() {
	if poll, window, frozen := in.pollable(); poll != nil && window > 0 && !frozen {
		in.page().sh.PollUntil.Store(Monotonic() + int64(window))
		in.guestPolling(true)
	}
}

// woken takes the loop's pending wake-up, if any.
func (in *Instance) woken() bool {
	select {
	case <-in.wake:
		return true
	default:
		return false
	}
}
