package cliargs

import "testing"

func TestWantsHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-socket", "s", "list"}, false},
		{[]string{"list", "-h"}, true},
		{[]string{"-help"}, true},
		{[]string{"--help"}, true},
		{[]string{"vm", "--", "-h"}, false},
	} {
		if got := WantsHelp(tt.args); got != tt.want {
			t.Errorf("WantsHelp(%q) = %t, want %t", tt.args, got, tt.want)
		}
	}
}
