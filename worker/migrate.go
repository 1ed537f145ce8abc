package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/vgpud/vgpud/worker/wire"
)

// ErrNotMigratable is returned for an instance whose state does not live in
// a worker process (vgpud -unsafe-in-process): migration only ever takes
// state out of a worker.
var ErrNotMigratable = errors.New("instance state is not in a worker process: migration needs workers")

// Migrator is implemented by a Backend whose device state can be taken out
// and put back (docs/migration.md). Every stream it hands out or takes in
// is a complete migration stream (Header .. End) for one round.
type Migrator interface {
	// ExtractRound writes one pre-copy round (final: the ring frozen
	// first, its state last) to w.
	ExtractRound(ctx context.Context, final bool, w io.Writer) (wire.ExtractReply, error)
	// Inject applies the stream r to the (frozen) instance.
	Inject(ctx context.Context, r io.Reader) error
	// Freeze stops the ring from fetching; Thaw lets it go on (forget:
	// the next round sends everything).
	Freeze(ctx context.Context) error
	Thaw(ctx context.Context, forget bool) error
	// GuestLog turns the write log of the instance's guest RAM on or off
	// (docs/migration.md "The vGPU runs while QEMU copies the VM"):
	// while it is on, the final ExtractRound ends with the guest pages
	// the worker wrote since, and turns it off; a Thaw turns it off too.
	// ErrNoGuestLog: the instance's worker predates it.
	GuestLog(ctx context.Context, on bool) error
}

// ErrNoGuestLog: the instance's worker (adopted from an earlier release
// in an upgrade in place) keeps no write log of guest RAM.
var ErrNoGuestLog = errors.New("the instance's worker keeps no write log of guest RAM (a worker of an earlier release)")

// errLogLost: the instance moved to another worker, or its worker was
// replaced, while its write log was on: what it wrote before is unknown.
var errLogLost = errors.New("the instance changed workers while its guest RAM was logged: the log is lost")

func (in *procInstance) GuestLog(ctx context.Context, on bool) error {
	pr, slot, err := in.bound()
	if err != nil {
		return err
	}
	if pr.info.Features&wire.FeatureGuestLog == 0 {
		if !on {
			return nil
		}
		return ErrNoGuestLog
	}
	if _, err := pr.call(ctx, &wire.GuestLog{Slot: slot, On: on}); err != nil {
		return fmt.Errorf("guest log: %w", err)
	}
	in.mu.Lock()
	in.logging, in.logSlot = nil, 0
	if on {
		in.logging, in.logSlot = pr, slot
	}
	in.mu.Unlock()
	return nil
}

var _ Migrator = (*procInstance)(nil)

// Migrator returns the instance's Migrator, or ErrNotMigratable.
func AsMigrator(b Backend) (Migrator, error) {
	m, ok := b.(Migrator)
	if !ok {
		return nil, ErrNotMigratable
	}
	return m, nil
}

func (in *procInstance) ExtractRound(ctx context.Context, final bool, w io.Writer) (wire.ExtractReply, error) {
	pr, slot, err := in.bound()
	if err != nil {
		return wire.ExtractReply{}, err
	}
	if final {
		in.mu.Lock()
		logging, logSlot := in.logging, in.logSlot
		in.logging = nil
		in.mu.Unlock()
		if logging != nil && (logging != pr || logSlot != slot) {
			return wire.ExtractReply{}, fmt.Errorf("extract round: %w", errLogLost)
		}
	}
	return in.extractFrom(ctx, pr, slot, final, w)
}

// extractFrom runs one extraction round on worker pr's slot.
func (in *procInstance) extractFrom(ctx context.Context, pr *process, slot uint32, final bool, w io.Writer) (wire.ExtractReply, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return wire.ExtractReply{}, fmt.Errorf("extract: %w", err)
	}
	var wg sync.WaitGroup
	var copyErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// On a failed write the read end closes: the worker's writes then
		// fail and it answers instead of blocking on a full pipe.
		_, copyErr = io.Copy(w, rd)
		rd.Close()
	}()
	r, err := pr.call(ctx, &wire.Extract{Slot: slot, Final: final}, int(wr.Fd()))
	wr.Close()
	wg.Wait()
	if err != nil {
		return wire.ExtractReply{}, fmt.Errorf("extract round: %w", err)
	}
	if copyErr != nil {
		return wire.ExtractReply{}, fmt.Errorf("extract round: send: %w", copyErr)
	}
	return wire.DecodeExtractReply(r.Body)
}

func (in *procInstance) Inject(ctx context.Context, src io.Reader) error {
	pr, slot, err := in.bound()
	if err != nil {
		return err
	}
	return in.injectInto(ctx, pr, slot, src)
}

// injectInto applies the stream src to worker pr's slot.
func (in *procInstance) injectInto(ctx context.Context, pr *process, slot uint32, src io.Reader) error {
	rd, wr, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	var wg sync.WaitGroup
	var copyErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, copyErr = io.Copy(wr, src)
		wr.Close() // the worker reads the end of the stream
	}()
	_, err = pr.call(ctx, &wire.Inject{Slot: slot}, int(rd.Fd()))
	rd.Close() // a worker that stopped reading makes the copy fail, not block
	wg.Wait()
	if err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	if copyErr != nil {
		return fmt.Errorf("inject: %w", copyErr)
	}
	return nil
}

func (in *procInstance) Freeze(ctx context.Context) error {
	pr, slot, err := in.bound()
	if err != nil {
		return err
	}
	return in.freezeOn(ctx, pr, slot)
}

func (in *procInstance) freezeOn(ctx context.Context, pr *process, slot uint32) error {
	_, err := pr.call(ctx, &wire.Freeze{Slot: slot})
	return err
}

func (in *procInstance) Thaw(ctx context.Context, forget bool) error {
	pr, slot, err := in.bound()
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.logging = nil
	in.mu.Unlock()
	_, err = pr.call(ctx, &wire.Thaw{Slot: slot, Forget: forget})
	return err
}

// thawOn lets worker pr's slot fetch again, forgetting what earlier
// extraction rounds sent (a relocation's state went whole).
func (in *procInstance) thawOn(pr *process, slot uint32) error {
	_, err := pr.call(context.Background(), &wire.Thaw{Slot: slot, Forget: true})
	return err
}
