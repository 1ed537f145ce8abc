package interference

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func small() *Dataset {
	return &Dataset{
		Version:  DatasetVersion,
		Device:   "pocl cpu",
		Measured: "abc123 2025-01-01",
		Workloads: []Workload{
			{Name: "a", Features: Features{DeviceUtil: 0.5, KernelMeanMs: 0.1}, AloneSec: 1},
			{Name: "b", Features: Features{DeviceUtil: 0.9, KernelMeanMs: 8, LongKernelMeanMs: 9}, AloneSec: 2.5},
		},
		Pairs: []Pair{
			{Victim: "a", Aggressor: "b", Overhead: 2.2},
			{Victim: "b", Aggressor: "a", Overhead: 0.05},
			{Victim: "a", Aggressor: "a", Overhead: -0.01},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, d := range []*Dataset{small(), structured(t), {Version: DatasetVersion}} {
		var buf bytes.Buffer
		if err := d.Encode(&buf); err != nil {
			t.Fatalf("Encode = %v", err)
		}
		got, err := Decode(&buf)
		if err != nil {
			t.Fatalf("Decode(Encode(d)) = %v", err)
		}
		if diff := cmp.Diff(d, got); diff != "" {
			t.Errorf("Decode(Encode(d)) differs (-want +got):\n%s", diff)
		}
	}
}

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ds.json")
	d := small()
	if err := d.Save(path); err != nil {
		t.Fatalf("Save = %v", err)
	}
	// Saving again replaces the file and leaves no temporary behind.
	d.Device = "other"
	if err := d.Save(path); err != nil {
		t.Fatalf("Save again = %v", err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("Load(Save(d)) differs (-want +got):\n%s", diff)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(ents))
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"version":2}`), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) || !errors.Is(err, ErrDataset) {
		t.Errorf("Load(bad) = %v, want an ErrDataset naming %s", err, bad)
	}
	missing := filepath.Join(t.TempDir(), "missing.json")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want an error naming the path", err)
	}
	d.Version = 0
	if err := d.Save(path); !errors.Is(err, ErrDataset) {
		t.Errorf("Save(invalid) = %v, want ErrDataset", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := func() string {
		var b bytes.Buffer
		small().Encode(&b)
		return b.String()
	}()
	tests := []struct {
		name, in, want string
	}{
		{"empty", ``, "decode"},
		{"not an object", `[]`, "decode"},
		{"null", `null`, "version 0"},
		{"version", `{"version":2}`, "version 2"},
		{"unknown field", `{"version":1,"bogus":1}`, "bogus"},
		{"trailing", valid + `{}`, "after"},
		{"trailing garbage", valid + `x`, "after"},
		{"two values", `{"version":1} {"version":1}`, "after"},
		{"number overflow", `{"version":1,"workloads":[{"name":"a","alone_s":1e999}]}`, "decode"},
		{"empty name", `{"version":1,"workloads":[{"name":"","alone_s":1}]}`, "name"},
		{"space in name", `{"version":1,"workloads":[{"name":"a b","alone_s":1}]}`, "printable"},
		{"long name", `{"version":1,"workloads":[{"name":"` + strings.Repeat("x", 65) + `","alone_s":1}]}`, "1..64"},
		{"duplicate name", `{"version":1,"workloads":[{"name":"a","alone_s":1},{"name":"a","alone_s":1}]}`, "twice"},
		{"alone zero", `{"version":1,"workloads":[{"name":"a","alone_s":0}]}`, "alone_s"},
		{"negative feature", `{"version":1,"workloads":[{"name":"a","alone_s":1,"features":{"mem_util":-1}}]}`, "mem_util"},
		{"unknown feature", `{"version":1,"workloads":[{"name":"a","alone_s":1,"features":{"gpu":1}}]}`, "gpu"},
		{"unknown victim", `{"version":1,"workloads":[{"name":"a","alone_s":1}],"pairs":[{"victim":"b","aggressor":"a"}]}`, `victim "b"`},
		{"unknown aggressor", `{"version":1,"workloads":[{"name":"a","alone_s":1}],"pairs":[{"victim":"a","aggressor":"c"}]}`, `aggressor "c"`},
		{"duplicate pair", `{"version":1,"workloads":[{"name":"a","alone_s":1}],"pairs":[{"victim":"a","aggressor":"a"},{"victim":"a","aggressor":"a","overhead":1}]}`, "twice"},
		{"overhead low", `{"version":1,"workloads":[{"name":"a","alone_s":1}],"pairs":[{"victim":"a","aggressor":"a","overhead":-1.5}]}`, "overhead"},
		{"overhead high", `{"version":1,"workloads":[{"name":"a","alone_s":1}],"pairs":[{"victim":"a","aggressor":"a","overhead":1001}]}`, "overhead"},
		{"long device", `{"version":1,"device":"` + strings.Repeat("d", 257) + `"}`, "device"},
		{"too large", strings.Repeat(" ", MaxDatasetBytes) + `{"version":1}`, "larger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decode(strings.NewReader(tt.in))
			if d != nil || !errors.Is(err, ErrDataset) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode = %v, %v; want nil and an ErrDataset containing %q", d, err, tt.want)
			}
		})
	}
}

func TestValidateBounds(t *testing.T) {
	d := &Dataset{Version: DatasetVersion}
	for i := range MaxWorkloads + 1 {
		d.Workloads = append(d.Workloads, Workload{Name: fmt.Sprintf("w%d", i), AloneSec: 1})
	}
	if err := d.Validate(); !errors.Is(err, ErrDataset) || !strings.Contains(err.Error(), "workloads") {
		t.Errorf("Validate(%d workloads) = %v, want too many", len(d.Workloads), err)
	}
	d.Workloads = d.Workloads[:MaxWorkloads]
	if err := d.Validate(); err != nil {
		t.Errorf("Validate(%d workloads) = %v", len(d.Workloads), err)
	}
	d = small()
	d.Measured = "\xff"
	if err := d.Validate(); !errors.Is(err, ErrDataset) {
		t.Errorf("Validate(invalid UTF-8) = %v, want ErrDataset", err)
	}
}

func TestLookups(t *testing.T) {
	d := small()
	if w, ok := d.Workload("b"); !ok || w.AloneSec != 2.5 {
		t.Errorf("Workload(b) = %+v, %v; want alone_s 2.5", w, ok)
	}
	if _, ok := d.Workload("c"); ok {
		t.Errorf("Workload(c) found")
	}
	if o, ok := d.Overhead("a", "b"); !ok || o != 2.2 {
		t.Errorf("Overhead(a, b) = %v, %v; want 2.2, true", o, ok)
	}
	if _, ok := d.Overhead("b", "b"); ok {
		t.Errorf("Overhead(b, b) found")
	}
	want := Features{DeviceUtil: 0.7, KernelMeanMs: 4.05, LongKernelMeanMs: 4.5}
	if got := d.Mean(); !reflect.DeepEqual(got, want) {
		t.Errorf("Mean() = %+v, want %+v", got, want)
	}
	if got := (&Dataset{}).Mean(); got != (Features{}) {
		t.Errorf("Mean() of no workloads = %+v, want zero", got)
	}
}

// FuzzDecode's seeds are short: the fuzzer minimizes each input that
// finds new coverage, in time quadratic in its length, and fuzzes nothing
// meanwhile; mutants of the kilobyte of indented JSON that small()
// encodes to stalled a 20 s run for most of it. The first seed is small()
// in brief: two workloads, features, three pairs, one of them a
// workload beside itself.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"device":"pocl","measured":"x","workloads":[{"name":"a","features":{"device_util":0.5,"kernel_mean_ms":0.1},"alone_s":1},` +
		`{"name":"b","features":{"long_kernel_mean_ms":9},"alone_s":2.5}],"pairs":[{"victim":"a","aggressor":"b","overhead":2.2},` +
		`{"victim":"b","aggressor":"a","overhead":0.05},{"victim":"a","aggressor":"a","overhead":-0.01}]}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"workloads":[],"pairs":[]}`))
	f.Add([]byte(`{"version":1,"workloads":[{"name":"a","alone_s":1}],"pairs":[{"victim":"a","aggressor":"a","overhead":-0}]}`))
	f.Add([]byte(`{"version":1,"workloads":[{"name":"a","alone_s":1},{"name":"a","alone_s":1}]}`))
	f.Add([]byte(`{"version":1,"bogus":true}`))
	f.Add([]byte(`{"version":1} {}`))
	f.Add([]byte(`{"version":1,"device":"\u00e9\ud800"}`))
	f.Add([]byte(`{"Version":1,"Workloads":[{"NAME":"x","alone_s":1e-300,"features":{"KERNEL_MEAN_MS":1e300}}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := Decode(bytes.NewReader(in))
		if err != nil {
			if d != nil {
				t.Fatalf("Decode = %+v with error %v", d, err)
			}
			return
		}
		var b bytes.Buffer
		if err := d.Encode(&b); err != nil {
			t.Fatalf("Encode(Decode(in)) = %v", err)
		}
		again, err := Decode(&b)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(in))) = %v", err)
		}
		if diff := cmp.Diff(d, again); diff != "" {
			t.Fatalf("re-decoded dataset differs (-first +second):\n%s", diff)
		}
	})
}
