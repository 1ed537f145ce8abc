package mdev

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"
)

// ErrBadName is returned for an instance name or label an operator cannot
// use (docs/operating.md, "Names and labels").
var ErrBadName = errors.New("bad name")

// nameRE is what an instance name and a label key may be: a letter or
// digit first, then letters, digits, '.', '_' and '-', 63 at most.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// maxLabels bounds an instance's labels; maxLabelValue a label's value.
const (
	maxLabels     = 32
	maxLabelValue = 256
)

// validName checks an instance name: "" (none) or nameRE and not a UUID,
// so that a name never shadows an instance's UUID.
func validName(name string) error {
	if name == "" {
		return nil
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w %q: a letter or digit, then letters, digits, '.', '_' or '-', 63 at most", ErrBadName, name)
	}
	if _, err := uuid.Parse(name); err == nil {
		return fmt.Errorf("%w %q: a UUID is not a name", ErrBadName, name)
	}
	return nil
}

// validLabels checks an instance's labels.
func validLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return fmt.Errorf("%w: %d labels, at most %d", ErrBadName, len(labels), maxLabels)
	}
	for k, v := range labels {
		if !nameRE.MatchString(k) {
			return fmt.Errorf("%w: label key %q: a letter or digit, then letters, digits, '.', '_' or '-', 63 at most", ErrBadName, k)
		}
		if len(v) > maxLabelValue {
			return fmt.Errorf("%w: label %s: value of %d bytes, at most %d", ErrBadName, k, len(v), maxLabelValue)
		}
	}
	return nil
}

// Resolve returns the UUID of the instance ref names: ref itself when an
// instance has that UUID, else the UUID of the instance named ref.
// Unknown: ErrNotFound.
func (m *Manager) Resolve(ref string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.instances[ref]; ok {
		return ref, nil
	}
	if u, err := uuid.Parse(ref); err == nil {
		if _, ok := m.instances[u.String()]; ok {
			return u.String(), nil
		}
	}
	if ref != "" {
		for id, in := range m.instances {
			if in.name == ref {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("%q: %w", ref, ErrNotFound)
}

// CheckName checks an instance name as Create does ("" passes: no name).
func CheckName(name string) error { return validName(name) }
