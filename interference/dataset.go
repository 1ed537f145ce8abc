package interference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// DatasetVersion is the version of the dataset format this package reads
// and writes (docs/placement.md "Dataset").
const DatasetVersion = 1

// Bounds on a dataset: what a file may hold before Validate refuses it.
const (
	// MaxDatasetBytes bounds the encoded size Decode reads.
	MaxDatasetBytes = 16 << 20
	// MaxWorkloads bounds the number of workloads.
	MaxWorkloads = 1024
	// MaxNameLen bounds a workload's name, in bytes.
	MaxNameLen = 64
	// MaxTextLen bounds Device and Measured, in bytes.
	MaxTextLen = 256
	// MinOverhead and MaxOverhead bound a pair's overhead: a victim at
	// most twice as fast (-1 would be infinitely fast), at most 1001
	// times as slow.
	MinOverhead = -1
	MaxOverhead = 1000
)

// ErrDataset is wrapped by every error that says a dataset is invalid.
var ErrDataset = errors.New("invalid interference dataset")

// Workload is one workload of a dataset: what it does alone.
type Workload struct {
	// Name identifies the workload: 1..64 printable ASCII bytes, no
	// spaces, unique within the dataset.
	Name string `json:"name"`
	// Features were measured while it ran alone.
	Features Features `json:"features"`
	// AloneSec is its time per iteration alone, in seconds (> 0).
	AloneSec float64 `json:"alone_s"`
}

// Pair is one measurement: the victim run beside the aggressor (run
// repeatedly).
type Pair struct {
	Victim    string `json:"victim"`
	Aggressor string `json:"aggressor"`
	// Overhead is the victim's time per iteration beside the aggressor
	// over its time alone, minus 1: 0 for no interference, 1 for twice as
	// slow. Within [MinOverhead, MaxOverhead].
	Overhead float64 `json:"overhead"`
}

// Dataset is an interference dataset, as a file holds it
// (docs/placement.md "Dataset"). A workload may be paired with itself
// (two instances of it side by side).
type Dataset struct {
	// Version is DatasetVersion.
	Version int `json:"version"`
	// Device is the physical device it was measured on (free text, at
	// most 256 bytes of UTF-8).
	Device string `json:"device"`
	// Measured says when and from what it was measured: commit and date
	// (free text, at most 256 bytes of UTF-8).
	Measured  string     `json:"measured"`
	Workloads []Workload `json:"workloads"`
	Pairs     []Pair     `json:"pairs"`
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrDataset}, args...)...)
}

// Decode reads one dataset from r: at most MaxDatasetBytes, one JSON value
// with no unknown fields and nothing after it, that Validate accepts. r is
// untrusted.
func Decode(r io.Reader) (*Dataset, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxDatasetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read dataset: %w", err)
	}
	if len(b) > MaxDatasetBytes {
		return nil, invalid("larger than %d bytes", MaxDatasetBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Dataset
	if err := dec.Decode(&d); err != nil {
		return nil, invalid("decode: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("data after the dataset")
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Encode writes d to w as indented JSON, after checking it with Validate.
func (d *Dataset) Encode(w io.Writer) error {
	if err := d.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("encode dataset: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write dataset: %w", err)
	}
	return nil
}

// Load reads the dataset in the file at path.
func Load(path string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	defer f.Close()
	d, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("load dataset %s: %w", path, err)
	}
	return d, nil
}

// Save writes d to the file at path atomically: to a temporary file in the
// same directory, synced, then renamed over path. A reader sees the old
// file or the new one, never part of one.
func (d *Dataset) Save(path string) (err error) {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("save dataset %s: %w", path, err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("save dataset: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("save dataset %s: %w", path, err)
		}
	}()
	if err := d.Encode(f); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Validate checks everything a dataset file could get wrong: the version,
// the bounds on its text and its number of workloads, each workload's name
// (1..64 printable ASCII bytes without spaces, unique), features and time
// alone, each pair's workloads (known ones) and overhead, and that no
// (victim, aggressor) pair is measured twice. Its errors wrap ErrDataset.
func (d *Dataset) Validate() error {
	if d.Version != DatasetVersion {
		return invalid("version %d: want %d", d.Version, DatasetVersion)
	}
	for _, t := range []struct{ name, s string }{{"device", d.Device}, {"measured", d.Measured}} {
		if len(t.s) > MaxTextLen || !utf8.ValidString(t.s) {
			return invalid("%s: want at most %d bytes of UTF-8", t.name, MaxTextLen)
		}
	}
	if len(d.Workloads) > MaxWorkloads {
		return invalid("%d workloads: want at most %d", len(d.Workloads), MaxWorkloads)
	}
	names := make(map[string]bool, len(d.Workloads))
	for i, w := range d.Workloads {
		if err := checkName(w.Name); err != nil {
			return invalid("workload %d: %v", i, err)
		}
		if names[w.Name] {
			return invalid("workload %d: name %q used twice", i, w.Name)
		}
		names[w.Name] = true
		if err := w.Features.Validate(); err != nil {
			return invalid("workload %q: %v", w.Name, err)
		}
		if !finite(w.AloneSec) || w.AloneSec <= 0 {
			return invalid("workload %q: alone_s = %v: want a finite number > 0", w.Name, w.AloneSec)
		}
	}
	seen := make(map[Key]bool, len(d.Pairs))
	for i, p := range d.Pairs {
		if !names[p.Victim] {
			return invalid("pair %d: victim %q: no such workload", i, p.Victim)
		}
		if !names[p.Aggressor] {
			return invalid("pair %d: aggressor %q: no such workload", i, p.Aggressor)
		}
		k := Key{p.Victim, p.Aggressor}
		if seen[k] {
			return invalid("pair %d: victim %q beside aggressor %q measured twice", i, p.Victim, p.Aggressor)
		}
		seen[k] = true
		if !finite(p.Overhead) || p.Overhead < MinOverhead || p.Overhead > MaxOverhead {
			return invalid("pair %d (%q beside %q): overhead %v: want a number in [%d, %d]",
				i, p.Victim, p.Aggressor, p.Overhead, MinOverhead, MaxOverhead)
		}
	}
	return nil
}

func checkName(s string) error {
	if len(s) == 0 || len(s) > MaxNameLen {
		return fmt.Errorf("name %q: want 1..%d bytes", s, MaxNameLen)
	}
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("name %q: byte %d (%#x): want printable ASCII without spaces", s, i, c)
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Workload returns the workload called name.
func (d *Dataset) Workload(name string) (Workload, bool) {
	for _, w := range d.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// Mean returns the mean of the workloads' features: the prior for a
// newcomer whose kind is not known yet. It is the zero Features when
// there is no workload.
func (d *Dataset) Mean() Features {
	var m [NumFeatures]float64
	for i, w := range d.Workloads {
		for f := range NumFeatures {
			// A running mean: never overflows for features >= 0.
			m[f] += (w.Features.Get(f) - m[f]) / float64(i+1)
		}
	}
	return fromVector(m)
}

// Overhead returns the measured overhead of victim beside aggressor. It
// scans the pairs: callers that look up many keep their own index.
func (d *Dataset) Overhead(victim, aggressor string) (float64, bool) {
	for _, p := range d.Pairs {
		if p.Victim == victim && p.Aggressor == aggressor {
			return p.Overhead, true
		}
	}
	return 0, false
}

// fromVector returns the Features whose feature f is v[f].
func fromVector(v [NumFeatures]float64) Features {
	return Features{
		DeviceUtil:       v[DeviceUtil],
		MemUtil:          v[MemUtil],
		ToDevMBps:        v[ToDevMBps],
		FromDevMBps:      v[FromDevMBps],
		VCPUs:            v[VCPUs],
		VCPUUtil:         v[VCPUUtil],
		VMMemGiB:         v[VMMemGiB],
		WorkItems:        v[WorkItems],
		KernelMeanMs:     v[KernelMeanMs],
		LongKernelMeanMs: v[LongKernelMeanMs],
		LongShortRatio:   v[LongShortRatio],
		LaunchesPerSec:   v[LaunchesPerSec],
	}
}
