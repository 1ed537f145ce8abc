package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// pick returns the index in infos that selector names: "" is the first
// device, a decimal number is an index, anything else a case-insensitive
// substring of exactly one device name (an exact name match wins).
func pick(infos []Info, selector string) (int, error) {
	if len(infos) == 0 {
		return 0, fmt.Errorf("%w: no devices", ErrNoDevice)
	}
	if selector == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(selector); err == nil {
		if n < 0 || n >= len(infos) {
			return 0, fmt.Errorf("%w: index %d, have %s", ErrNoDevice, n, listNames(infos))
		}
		return n, nil
	}
	want := strings.ToLower(selector)
	var matches []int
	for i, in := range infos {
		name := strings.ToLower(in.Name)
		if name == want {
			return i, nil
		}
		if strings.Contains(name, want) {
			matches = append(matches, i)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return 0, fmt.Errorf("%w: none named like %q, have %s", ErrNoDevice, selector, listNames(infos))
	}
	return 0, fmt.Errorf("%w: %q is ambiguous, have %s", ErrNoDevice, selector, listNames(infos))
}

func listNames(infos []Info) string {
	s := make([]string, len(infos))
	for i, in := range infos {
		s[i] = fmt.Sprintf("%d %q", in.Index, in.Name)
	}
	return strings.Join(s, ", ")
}
