package control

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
)

// tinyDataset: two workloads, every ordered pair.
func tinyDataset() *interference.Dataset {
	short := interference.Features{DeviceUtil: 0.2, KernelMeanMs: 0.05, LaunchesPerSec: 2000}
	long := interference.Features{DeviceUtil: 0.9, KernelMeanMs: 30, LongKernelMeanMs: 30, LongShortRatio: 1, LaunchesPerSec: 30}
	return &interference.Dataset{Version: interference.DatasetVersion, Device: "test", Measured: "test",
		Workloads: []interference.Workload{{Name: "short", Features: short, AloneSec: 0.001}, {Name: "long", Features: long, AloneSec: 0.03}},
		Pairs: []interference.Pair{{Victim: "short", Aggressor: "short", Overhead: 0.2}, {Victim: "short", Aggressor: "long", Overhead: 3},
			{Victim: "long", Aggressor: "short", Overhead: 0.1}, {Victim: "long", Aggressor: "long", Overhead: 0.9}}}
}

func TestPlacementAPI(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	st, err := c.Placement(ctx)
	if err != nil || st.Policy != mdev.PlaceFewest || st.Dataset != nil {
		t.Fatalf("Placement() = %+v, %v; want fewest, no dataset", st, err)
	}
	if _, err := c.PlacementDataset(ctx); err == nil {
		t.Error("PlacementDataset() with none = nil error")
	}
	if _, err := c.SetPlacement(ctx, PlacementBody{Policy: mdev.PlaceInterference}); err == nil {
		t.Error("interference without a dataset accepted")
	}
	bad := tinyDataset()
	bad.Pairs[0].Victim = "nobody"
	if _, err := c.SetPlacement(ctx, PlacementBody{Dataset: bad}); err == nil {
		t.Error("a dataset naming an unknown workload accepted")
	}
	st, err = c.SetPlacement(ctx, PlacementBody{Dataset: tinyDataset()})
	if err != nil || st.Policy != mdev.PlaceInterference || st.Dataset == nil || st.Dataset.Pairs != 4 {
		t.Fatalf("SetPlacement(dataset) = %+v, %v; want interference over 4 pairs", st, err)
	}
	ds, err := c.PlacementDataset(ctx)
	if err != nil || len(ds.Workloads) != 2 {
		t.Errorf("PlacementDataset() = %+v, %v", ds, err)
	}
	ex, err := c.Explain(ctx, "p", mdev.PlaceHint{Workload: "long"})
	if err != nil || ex.Chosen != 0 || ex.From != "workload long" || ex.Newcomer.KernelMeanMs != 30 {
		t.Errorf("Explain(long) = %+v, %v", ex, err)
	}
	in, err := c.Create(ctx, mdev.CreateRequest{Profile: "p", Hint: mdev.PlaceHint{Workload: "short"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Features.Validate(); err != nil {
		t.Errorf("instance features: %v", err)
	}
	if _, err := c.Create(ctx, mdev.CreateRequest{Profile: "p", Hint: mdev.PlaceHint{Workload: "short"}}); !errors.Is(err, mdev.ErrNoCapacity) {
		t.Errorf("Create on a full device = %v, want %v", err, mdev.ErrNoCapacity)
	}
	if st, err := c.SetPlacement(ctx, PlacementBody{Policy: mdev.PlaceRoundRobin}); err != nil || st.Policy != mdev.PlaceRoundRobin || st.Dataset == nil {
		t.Errorf("SetPlacement(round-robin) = %+v, %v; want the dataset kept", st, err)
	}
}
