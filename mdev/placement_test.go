package mdev

import (
	"errors"
	"testing"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/interference"
)

// shortLongModel predicts what the seed measured: a short-kernel workload
// suffers beside a long-kernel one, little else does.
type shortLongModel struct{}

func (shortLongModel) Predict(v, a interference.Features) float64 {
	if v.KernelMeanMs < interference.LongKernelMs && a.KernelMeanMs >= interference.LongKernelMs {
		return 3
	}
	return 0.1
}
func (shortLongModel) Options() interference.Options { return interference.Options{Kind: "test"} }

func (m *Manager) useModel(model interference.Model) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.place.model, m.place.placer = model, interferencePlacer{model}
}

func createOn(t *testing.T, m *Manager, req CreateRequest) int {
	t.Helper()
	in, err := m.Create(req)
	if err != nil {
		t.Fatalf("Create(%+v) = %v", req, err)
	}
	return in.Device()
}

func TestPlaceFewestAndRoundRobin(t *testing.T) {
	m := newManagerN(t, 3, []Profile{{Name: "p", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 2}})
	if got := m.Placement().Policy; got != PlaceFewest {
		t.Fatalf("default policy without a dataset = %s, want fewest", got)
	}
	dev1 := 1
	createOn(t, m, CreateRequest{Profile: "p", Device: &dev1})
	// fewest: device 0 (empty), then 2 (empty), then 0 again (ties: lowest index).
	for i, want := range []int{0, 2, 0} {
		if got := createOn(t, m, CreateRequest{Profile: "p"}); got != want {
			t.Errorf("fewest placement %d on device %d, want %d", i, got, want)
		}
	}
	if err := m.SetPlacement(PlaceRoundRobin, nil); err != nil {
		t.Fatal(err)
	}
	// Device 0 is full: round-robin (from device 0) skips it.
	for i, want := range []int{1, 2} {
		if got := createOn(t, m, CreateRequest{Profile: "p"}); got != want {
			t.Errorf("round-robin placement %d on device %d, want %d", i, got, want)
		}
	}
	if _, err := m.Create(CreateRequest{Profile: "p"}); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("Create on a full host = %v, want %v", err, ErrNoCapacity)
	}
	ex, err := m.Explain("p", PlaceHint{})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Chosen != -1 || len(ex.Candidates) != 3 || ex.Candidates[1].Room || len(ex.Candidates[2].Residents) != 2 {
		t.Errorf("Explain on a full host = %+v", ex)
	}
}

func TestRoundRobinOrder(t *testing.T) {
	m := newManagerN(t, 2, []Profile{{Name: "p", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 4}})
	if err := m.SetPlacement(PlaceRoundRobin, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{0, 1, 0, 1} {
		if got := createOn(t, m, CreateRequest{Profile: "p"}); got != want {
			t.Errorf("placement %d on device %d, want %d", i, got, want)
		}
	}
}

func TestPlacementErrors(t *testing.T) {
	m := newManagerN(t, 2, nil)
	if err := m.SetPlacement(PlaceInterference, nil); !errors.Is(err, ErrNoModel) {
		t.Errorf("interference without a dataset = %v, want %v", err, ErrNoModel)
	}
	if err := m.SetPlacement("best", nil); !errors.Is(err, ErrUnknownPlacement) {
		t.Errorf("unknown policy = %v, want %v", err, ErrUnknownPlacement)
	}
	bad := interference.Features{DeviceUtil: -1}
	for _, h := range []PlaceHint{
		{Workload: "x", Like: "y"},
		{Like: "00000000-0000-0000-0000-000000000000"},
		{Workload: "madd"}, // no dataset
		{Features: &bad},
	} {
		if _, err := m.Explain("vgpu-small", h); err == nil {
			t.Errorf("Explain(hint %+v) = nil error", h)
		}
		if _, err := m.Create(CreateRequest{Profile: "vgpu-small", Hint: h}); err == nil {
			t.Errorf("Create(hint %+v) = nil error", h)
		}
	}
	if _, err := m.Explain("nope", PlaceHint{}); !errors.Is(err, ErrUnknownProfile) {
		t.Errorf("Explain(unknown profile) = %v", err)
	}
	if n := len(m.List()); n != 0 {
		t.Errorf("%d instances after refused creates", n)
	}
}

// runKernel builds src and launches its kernel "k" over items, n times.
func runKernel(t *testing.T, inst *Instance, src string, items uint64, n int) {
	t.Helper()
	d := openDriver(t, attach(t, inst))
	prog, _, err := d.Build(src, "")
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.CreateBuffer(4 * items)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := d.Launch(prog, "k", driver.Range1(items, 1), driver.BufferArg(buf)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestPlaceByInterference is the mechanism behind placement by model: the
// residents' features come from what they really ran, and a short-kernel
// newcomer goes beside the short-kernel resident, away from the
// long-kernel one, which "fewest" would not tell apart.
func TestPlaceByInterference(t *testing.T) {
	m := newManagerN(t, 2, nil)
	m.useModel(shortLongModel{})
	d0, d1 := 0, 1
	long := mustCreate(t, m, CreateRequest{Profile: "vgpu-small", Device: &d0, NoReuse: true})
	short := mustCreate(t, m, CreateRequest{Profile: "vgpu-small", Device: &d1, NoReuse: true})
	runKernel(t, long, `__kernel void k(__global float *b) {
		float x = b[get_global_id(0)];
		for (int i = 0; i < 2000000; i++) x = x * 0.999f + 0.5f;
		b[get_global_id(0)] = x;
	}`, 1, 2)
	runKernel(t, short, `__kernel void k(__global float *b) { b[get_global_id(0)] += 1.0f; }`, 1, 2)
	if f := long.Features(); f.KernelMeanMs < interference.LongKernelMs {
		t.Fatalf("long resident's kernels average %.3f ms, want >= %v ms", f.KernelMeanMs, interference.LongKernelMs)
	}
	if f := short.Features(); f.KernelMeanMs >= interference.LongKernelMs {
		t.Fatalf("short resident's kernels average %.3f ms", f.KernelMeanMs)
	}
	newcomer := interference.Features{KernelMeanMs: 0.05}
	ex, err := m.Explain("vgpu-small", PlaceHint{Features: &newcomer})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Policy != PlaceInterference || ex.Chosen != 1 || ex.Candidates[0].Score <= ex.Candidates[1].Score {
		t.Errorf("Explain = %+v, want device 1 (beside the short resident) scored below device 0", ex)
	}
	if got := createOn(t, m, CreateRequest{Profile: "vgpu-small", Hint: PlaceHint{Features: &newcomer}}); got != 1 {
		t.Errorf("short newcomer placed on device %d, want 1", got)
	}
	// "like" an instance: the long resident's twin would slow the two
	// short residents of device 1; beside the long one it costs less.
	if got := createOn(t, m, CreateRequest{Profile: "vgpu-small", Hint: PlaceHint{Like: long.UUID()}}); got != 0 {
		t.Errorf("long newcomer placed on device %d, want 0", got)
	}
}
