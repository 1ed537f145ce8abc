package libvirt

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Defaults of the Watcher's zero fields.
const (
	DefaultResync     = time.Minute
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 30 * time.Second
	// settle is when the second look after the child's start comes: virsh
	// registers for events a moment after it starts, and a domain that
	// started in between is neither in the first look nor in an event.
	settle = 5 * time.Second
)

// maxEventLine bounds one line of virsh event's output; longer ones are
// skipped.
const maxEventLine = 8 << 10

// Watcher makes vGPUs automatic for libvirt domains whose metadata names
// an instance: it follows libvirt's lifecycle events with a child `virsh
// event --loop --event lifecycle` and, on every domain start, calls
// Attacher.Ensure for it. Each time the child (re)starts (and again 5 s
// later), and every Resync, it looks at every active domain too: that
// gives the running domains their vGPU back after vgpud restarted, and
// catches a start whose event came while the child was down or still
// registering with libvirtd (which virsh does not announce).
//
// Work on different domains runs concurrently; events for a domain that
// is being worked on are coalesced into one more pass. A failure is
// logged with the domain's name and affects no other domain.
type Watcher struct {
	Attacher *Attacher
	Logger   *slog.Logger
	// Resync is how often every active domain is looked at again (0:
	// DefaultResync; negative: only when the child starts).
	Resync time.Duration
	// MinBackoff and MaxBackoff bound the wait before the child is
	// started again after it ended; the wait doubles from the first to
	// the second while it keeps ending within MaxBackoff of its start.
	MinBackoff, MaxBackoff time.Duration

	mu      sync.Mutex
	pending map[string]*bool // domain -> another pass wanted
	wg      sync.WaitGroup
}

func (w *Watcher) log() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}

// Run watches until ctx ends, then stops the child and waits for the
// work in progress (which ctx's end cancels). It always returns nil:
// libvirt being away is logged and retried, never fatal to vgpud.
func (w *Watcher) Run(ctx context.Context) error {
	minB, maxB := w.MinBackoff, w.MaxBackoff
	if minB <= 0 {
		minB = DefaultMinBackoff
	}
	if maxB < minB {
		maxB = max(DefaultMaxBackoff, minB)
	}
	backoff := minB
	defer w.wg.Wait()
	for {
		started := time.Now()
		err := w.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > maxB {
			backoff = minB
		}
		w.log().Warn("libvirt event listener ended; starting it again", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxB)
	}
}

// listen runs one child until it ends or ctx does.
func (w *Watcher) listen(ctx context.Context) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out, wait, err := w.Attacher.Virsh.Start(cctx, "event", "--loop", "--event", "lifecycle")
	if err != nil {
		return err
	}
	lines := make(chan string)
	readDone := make(chan error, 1)
	go func() {
		defer close(lines)
		readDone <- readLines(out, maxEventLine, func(line string) {
			select {
			case lines <- line:
			case <-cctx.Done():
			}
		}, func(n int) {
			w.log().Warn("libvirt event line too long; skipped", "bytes", n)
		})
	}()
	w.log().Info("watching libvirt domains")
	w.resync(ctx)
	again := time.NewTimer(settle)
	defer again.Stop()
	var tick <-chan time.Time
	if w.Resync >= 0 {
		every := w.Resync
		if every == 0 {
			every = DefaultResync
		}
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				rerr := <-readDone
				return errors.Join(wait(), rerr)
			}
			w.event(ctx, line)
		case <-again.C:
			w.resync(ctx)
		case <-tick:
			w.resync(ctx)
		case <-ctx.Done():
			cancel() // kills the child
			for range lines {
			}
			<-readDone
			wait()
			return ctx.Err()
		}
	}
}

// event handles one line of the child's output.
func (w *Watcher) event(ctx context.Context, line string) {
	ev, err := ParseEvent(line)
	if err != nil {
		w.log().Debug("libvirt event not understood", "err", err)
		return
	}
	if ev.Kind == "Started" {
		w.kick(ctx, ev.Domain)
	}
}

// resync looks at every active domain.
func (w *Watcher) resync(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := w.Attacher.Virsh.Run(lctx, nil, "list", "--name")
	if err != nil {
		w.log().Warn("listing libvirt domains", "err", err)
		return
	}
	names, err := ParseNames(out)
	if err != nil {
		w.log().Warn("libvirt domain names skipped", "err", err)
	}
	for _, n := range names {
		w.kick(ctx, n)
	}
}

// kick makes sure Ensure runs for domain after now: it starts a pass, or
// asks the one in progress for another.
func (w *Watcher) kick(ctx context.Context, domain string) {
	w.mu.Lock()
	if again, busy := w.pending[domain]; busy {
		*again = true
		w.mu.Unlock()
		return
	}
	if w.pending == nil {
		w.pending = make(map[string]*bool)
	}
	again := new(bool)
	w.pending[domain] = again
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			w.ensure(ctx, domain)
			w.mu.Lock()
			if !*again || ctx.Err() != nil {
				delete(w.pending, domain)
				w.mu.Unlock()
				return
			}
			*again = false
			w.mu.Unlock()
		}
	}()
}

func (w *Watcher) ensure(ctx context.Context, domain string) {
	rep, err := w.Attacher.Ensure(ctx, domain)
	switch {
	case err != nil && ctx.Err() == nil:
		w.log().Warn("libvirt domain did not get its vGPU", "domain", domain, "err", err)
	case rep != nil:
		w.log().Info("libvirt domain got its vGPU", "domain", rep.Domain, "instance", rep.Instance,
			"action", rep.Action, "slot", rep.Slot, "took", rep.Took, "programs", rep.Programs, "agent_error", rep.AgentErr)
	}
}

// readLines calls line for each line of r (without its end), skipping
// lines longer than maxLen (tooLong is told their length), until r ends;
// it returns nil at EOF.
func readLines(r io.Reader, maxLen int, line func(string), tooLong func(int)) error {
	br := bufio.NewReaderSize(r, maxLen)
	long := 0
	for {
		b, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long += len(b)
			continue
		case long > 0:
			tooLong(long + len(b))
			long = 0
		case len(b) > 0:
			line(string(b))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}
