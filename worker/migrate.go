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
	_, err = pr.call(ctx, &wire.Thaw{Slot: slot, Forget: forget})
	return err
}

// thawOn lets worker pr's slot fetch again, forgetting what earlier
// extraction rounds sent (a relocation's state went whole).
func (in *procInstance) thawOn(pr *process, slot uint32) error {
	_, err := pr.call(context.Background(), &wire.Thaw{Slot: slot, Forget: true})
	return err
}
