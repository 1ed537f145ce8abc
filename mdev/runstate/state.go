package runstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
)

// StateFile is the state file's name in the run directory.
const StateFile = "state.json"

// Format and Version identify the state file (docs/operating.md "The run
// directory"). A file of another version is refused, not guessed at.
const (
	Format  = "vgpud-state"
	Version = 1
)

// MaxStateBytes bounds the state file a daemon reads.
const MaxStateBytes = 16 << 20

// ErrBadState: the state file cannot be used (corrupt, another format or
// version); the error says why and where.
var ErrBadState = errors.New("bad state file")

// State is what the state file holds.
type State struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Instances in creation order... as the manager lists them.
	Instances []Instance `json:"instances"`
	// Policies are the devices' scheduling policies, by device index.
	Policies []Policy `json:"policies,omitempty"`
	// ReuseBudgets are the budgets an operator pinned, by domain.
	ReuseBudgets []ReuseBudget `json:"reuse_budgets,omitempty"`
	// Placement is the placement an operator set at run time (vgpuctl
	// place), if any.
	Placement *Placement `json:"placement,omitempty"`
	// ProfileOvercommit are the vGPU types' overcommit settings an
	// operator set at run time (vgpuctl overcommit -profile).
	ProfileOvercommit []ProfileOvercommit `json:"profile_overcommit,omitempty"`
}

// ProfileOvercommit is a vGPU type's overcommit setting.
type ProfileOvercommit struct {
	Profile    string          `json:"profile"`
	Overcommit mdev.Overcommit `json:"overcommit"`
}

// Placement is the placement policy and the dataset its model learned
// from (docs/placement.md).
type Placement struct {
	Policy  string                `json:"policy"`
	Dataset *interference.Dataset `json:"dataset,omitempty"`
}

// Instance is one instance's record.
type Instance struct {
	UUID    string            `json:"uuid"`
	Profile string            `json:"profile"`
	Device  int               `json:"device"`
	Reuse   mdev.ReuseSetting `json:"reuse"`
	// Share is the instance's fixed-share weight (it may differ from its
	// profile's after vgpuctl set-share).
	Share  uint32      `json:"share"`
	Limits mdev.Limits `json:"limits"`
	// Overcommit is the instance's own overcommit setting, if it has one
	// (docs/overcommit.md).
	Overcommit mdev.Overcommit `json:"overcommit,omitzero"`
	// Name and Labels are the operator's (vgpuctl create -name, -label).
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Policy is a device's scheduling policy.
type Policy struct {
	Device int    `json:"device"`
	Policy string `json:"policy"`
}

// ReuseBudget is a pinned reuse budget.
type ReuseBudget struct {
	Domain string `json:"domain"`
	Bytes  int64  `json:"bytes"`
}

// Encode is the state file's bytes for st (Format and Version set).
func Encode(st State) ([]byte, error) {
	st.Format, st.Version = Format, Version
	if st.Instances == nil {
		st.Instances = []Instance{}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Decode parses a state file: exactly one JSON object of this Format and
// Version with no unknown fields, each record's fields in range. Errors
// wrap ErrBadState.
func Decode(b []byte) (State, error) {
	var st State
	if len(b) > MaxStateBytes {
		return st, fmt.Errorf("%w: %d bytes, at most %d", ErrBadState, len(b), MaxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return State{}, fmt.Errorf("%w: trailing data", ErrBadState)
	}
	if st.Format != Format {
		return State{}, fmt.Errorf("%w: format %q, want %q", ErrBadState, st.Format, Format)
	}
	if st.Version != Version {
		return State{}, fmt.Errorf("%w: version %d, this vgpud reads %d", ErrBadState, st.Version, Version)
	}
	if st.Instances == nil {
		st.Instances = []Instance{} // "instances": null or missing: none
	}
	seen := map[string]bool{}
	for i, in := range st.Instances {
		switch {
		case in.UUID == "" || in.Profile == "":
			return State{}, fmt.Errorf("%w: instance %d: no uuid or profile", ErrBadState, i)
		case seen[in.UUID]:
			return State{}, fmt.Errorf("%w: instance %s recorded twice", ErrBadState, in.UUID)
		case in.Device < 0:
			return State{}, fmt.Errorf("%w: instance %s: device %d", ErrBadState, in.UUID, in.Device)
		case in.Limits.KernelTimeout < 0 || in.Limits.TurnTimeout < 0 || in.Limits.Slice < 0 || in.Limits.BuildTimeout < 0:
			return State{}, fmt.Errorf("%w: instance %s: negative limit", ErrBadState, in.UUID)
		}
		seen[in.UUID] = true
	}
	for _, p := range st.Policies {
		if p.Device < 0 || p.Policy == "" {
			return State{}, fmt.Errorf("%w: policy %+v", ErrBadState, p)
		}
	}
	if p := st.Placement; p != nil {
		if _, err := mdev.ParsePlacementPolicy(p.Policy); err != nil {
			return State{}, fmt.Errorf("%w: %w", ErrBadState, err)
		}
		if p.Dataset != nil {
			if err := p.Dataset.Validate(); err != nil {
				return State{}, fmt.Errorf("%w: placement dataset: %w", ErrBadState, err)
			}
		}
	}
	return st, nil
}

// Load reads dir's state file; ok is false when there is none.
func Load(dir string) (st State, ok bool, err error) {
	path := filepath.Join(dir, StateFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxStateBytes+1))
	if err != nil {
		return State{}, false, fmt.Errorf("%s: %w", path, err)
	}
	st, err = Decode(b)
	if err != nil {
		return State{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return st, true, nil
}

// Save writes st to dir's state file atomically: a temporary file in dir,
// fsynced, renamed over the old one, and the directory fsynced, so a crash
// leaves the old file or the new one, never a mix.
func Save(dir string, st State) error {
	b, err := Encode(st)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, StateFile)
	tmp, err := os.CreateTemp(dir, StateFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing there
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.Write(b)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("save %s: %w", path, err)
		}
	} else {
		tmp.Close()
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("save %s: sync directory: %w", path, err)
	}
	return nil
}
