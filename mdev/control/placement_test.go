package control

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/interference/interferencetest"
	"github.com/vgpud/vgpud/mdev"
)

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
	bad := interferencetest.ShortLong()
	bad.Pairs[0].Victim = "nobody"
	if _, err := c.SetPlacement(ctx, PlacementBody{Dataset: bad}); err == nil {
		t.Error("a dataset naming an unknown workload accepted")
	}
	st, err = c.SetPlacement(ctx, PlacementBody{Dataset: interferencetest.ShortLong()})
	if err != nil || st.Policy != mdev.PlaceInterference || st.Dataset == nil || st.Dataset.Pairs != 64 {
		t.Fatalf("SetPlacement(dataset) = %+v, %v; want interference over 64 pairs", st, err)
	}
	ds, err := c.PlacementDataset(ctx)
	if err != nil || len(ds.Workloads) != 8 {
		t.Errorf("PlacementDataset() = %+v, %v", ds, err)
	}
	ex, err := c.Explain(ctx, "p", mdev.PlaceHint{Workload: "long1"})
	if err != nil || ex.Chosen != 0 || ex.From != "workload long1" || ex.Newcomer.KernelMeanMs != 10 {
		t.Errorf("Explain(long) = %+v, %v", ex, err)
	}
	in, err := c.Create(ctx, mdev.CreateRequest{Profile: "p", Hint: mdev.PlaceHint{Workload: "short0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Features.Validate(); err != nil {
		t.Errorf("instance features: %v", err)
	}
	if _, err := c.Create(ctx, mdev.CreateRequest{Profile: "p", Hint: mdev.PlaceHint{Workload: "short0"}}); !errors.Is(err, mdev.ErrNoCapacity) {
		t.Errorf("Create on a full device = %v, want %v", err, mdev.ErrNoCapacity)
	}
	if st, err := c.SetPlacement(ctx, PlacementBody{Policy: mdev.PlaceRoundRobin}); err != nil || st.Policy != mdev.PlaceRoundRobin || st.Dataset == nil {
		t.Errorf("SetPlacement(round-robin) = %+v, %v; want the dataset kept", st, err)
	}
}
