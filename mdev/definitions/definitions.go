// Package definitions keeps persistent instance definitions: one JSON
// file per instance in a directory an operator owns (by default
// /etc/vgpud/instances.d, as mdevctl keeps /etc/mdevctl.d), written by
// vgpuctl define or by hand, read by vgpud at every start, which creates
// each defined instance that does not exist yet. They sit beside the run
// directory's state.json: the state is what the daemon had, a definition
// what the operator wants there at every start.
package definitions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/vgpud/vgpud/mdev"
)

// DefaultDir is where vgpud looks for definitions unless told otherwise.
const DefaultDir = "/etc/vgpud/instances.d"

// ErrBadDefinition: a definition file or request cannot be used; the
// error says which and why.
var ErrBadDefinition = errors.New("bad definition")

// ErrNoDefinition: no definition has that name.
var ErrNoDefinition = errors.New("no such definition")

// maxFile bounds a definition file.
const maxFile = 64 << 10

// Definition is one instance an operator wants at every start. Its file
// is Dir/<name>.json.
type Definition struct {
	// Name is the instance's name (mdev.CreateRequest.Name) and the
	// file's.
	Name string `json:"name"`
	// UUID is fixed in the definition, so the instance keeps it across
	// restarts (vgpuctl define makes one up when not given).
	UUID    string `json:"uuid"`
	Profile string `json:"profile"`
	// Device is the physical device; nil: placed at each creation.
	Device      *int              `json:"device,omitempty"`
	ReuseDomain string            `json:"reuse_domain,omitempty"`
	NoReuse     bool              `json:"no_reuse,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// Request is the create request for d.
func (d Definition) Request() mdev.CreateRequest {
	return mdev.CreateRequest{UUID: d.UUID, Profile: d.Profile, Device: d.Device, ReuseDomain: d.ReuseDomain,
		NoReuse: d.NoReuse, Name: d.Name, Labels: d.Labels}
}

// Check is d's own validity (the manager checks the rest at creation).
func (d Definition) Check() error {
	if err := d.checkName(); err != nil {
		return err
	}
	switch {
	case d.Profile == "":
		return fmt.Errorf("%w %s: no profile", ErrBadDefinition, d.Name)
	case d.Device != nil && *d.Device < 0:
		return fmt.Errorf("%w %s: device %d", ErrBadDefinition, d.Name, *d.Device)
	}
	if _, err := uuid.Parse(d.UUID); err != nil {
		return fmt.Errorf("%w %s: uuid %q: %v", ErrBadDefinition, d.Name, d.UUID, err)
	}
	return nil
}

// Dir is a directory of definitions.
type Dir string

func (dir Dir) path(name string) string { return filepath.Join(string(dir), name+".json") }

// List reads every *.json definition in dir, by name; a directory that
// is not there holds none. A file that cannot be used is returned in bad
// (its error names it) and left out.
func (dir Dir) List() (defs []Definition, bad []error, err error) {
	ents, err := os.ReadDir(string(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		d, err := dir.Get(name)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		defs = append(defs, d)
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	return defs, bad, nil
}

// Get reads definition name.
func (dir Dir) Get(name string) (Definition, error) {
	var d Definition
	p := dir.path(name)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return d, fmt.Errorf("%w %q (%s)", ErrNoDefinition, name, p)
	}
	if err != nil {
		return d, err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxFile))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("%w: %s: %v", ErrBadDefinition, p, err)
	}
	if d.Name == "" {
		d.Name = name
	}
	if d.Name != name {
		return d, fmt.Errorf("%w: %s names %q: a definition's name is its file's", ErrBadDefinition, p, d.Name)
	}
	if err := d.Check(); err != nil {
		return d, fmt.Errorf("%s: %w", p, err)
	}
	return d, nil
}

// Put writes d (a UUID made up if it has none) atomically, replacing a
// definition of the same name, and returns what it wrote.
func (dir Dir) Put(d Definition) (Definition, error) {
	if d.UUID == "" {
		d.UUID = uuid.NewString()
	}
	if err := d.Check(); err != nil {
		return d, err
	}
	if err := os.MkdirAll(string(dir), 0o755); err != nil {
		return d, fmt.Errorf("define %s: %w", d.Name, err)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return d, err
	}
	tmp, err := os.CreateTemp(string(dir), ".define-*")
	if err != nil {
		return d, fmt.Errorf("define %s: %w", d.Name, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dir.path(d.Name))
	}
	if err != nil {
		return d, fmt.Errorf("define %s: %w", d.Name, err)
	}
	return d, nil
}

// Delete removes definition name.
func (dir Dir) Delete(name string) error {
	if err := (Definition{Name: name}).checkName(); err != nil {
		return err
	}
	err := os.Remove(dir.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w %q", ErrNoDefinition, name)
	}
	return err
}

// checkName: a definition has a name, an instance name (mdev.CheckName),
// which is also a safe file name.
func (d Definition) checkName() error {
	if d.Name == "" {
		return fmt.Errorf("%w: no name", ErrBadDefinition)
	}
	if err := mdev.CheckName(d.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadDefinition, err)
	}
	return nil
}

// Apply creates in m each definition whose instance (by UUID or name)
// does not exist; it goes on past what m refuses, and err says what.
func Apply(m *mdev.Manager, defs []Definition) (created []string, err error) {
	var errs []error
	for _, d := range defs {
		if _, rerr := m.Resolve(d.UUID); rerr == nil {
			continue
		}
		if _, rerr := m.Resolve(d.Name); rerr == nil {
			continue
		}
		in, cerr := m.Create(d.Request())
		if cerr != nil {
			errs = append(errs, fmt.Errorf("definition %s: %w", d.Name, cerr))
			continue
		}
		created = append(created, in.UUID())
	}
	return created, errors.Join(errs...)
}
