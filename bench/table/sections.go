package table

import (
	"fmt"
	"slices"
	"strings"
)

// ParseSections reads a -sections flag: a comma-separated list of table
// names out of all, duplicates dropped, in the order given.
func ParseSections(list string, all []string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(all, s) {
			return nil, fmt.Errorf("-sections: unknown section %q (have %s)", s, strings.Join(all, ", "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}
