package gpu

import (
	"errors"
	"testing"
)

func TestPick(t *testing.T) {
	infos := []Info{
		{Index: 0, Name: "basic-skylake"},
		{Index: 1, Name: "pthread-skylake"},
		{Index: 2, Name: "GeForce RTX"},
		{Index: 3, Name: "GeForce RTX 4090"},
	}
	for _, tc := range []struct {
		sel  string
		want int
	}{
		{"", 0}, {"0", 0}, {"3", 3}, {"PTHREAD", 1}, {"Basic", 0},
		{"geforce rtx", 2}, // the exact name wins over the longer one
		{"RTX 4", 3},
	} {
		got, err := pick(infos, tc.sel)
		if err != nil || got != tc.want {
			t.Errorf("pick(%q) = %d, %v, want %d", tc.sel, got, err, tc.want)
		}
	}
	// "4090" is a number, so an index, not a name.
	for _, sel := range []string{"skylake", "-1", "4", "4090", "radeon", "geforce"} {
		if got, err := pick(infos, sel); !errors.Is(err, ErrNoDevice) {
			t.Errorf("pick(%q) = %d, %v, want ErrNoDevice", sel, got, err)
		}
	}
	if got, err := pick(nil, ""); !errors.Is(err, ErrNoDevice) {
		t.Errorf("pick(nil, \"\") = %d, %v, want ErrNoDevice", got, err)
	}
}
