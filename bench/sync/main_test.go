package main

import (
	"context"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/guestagent/syncjob"
)

// TestRunRejectsBadFlags: bad settings fail before any guest boots.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-runs", "0"}, {"-steps", "0"}, {"-kernel-iters", "0"}, {"-vcpu-core", "-1"}, {"-vcpu-core", "4096"},
		{"-modes", "poll+spin"},
	} {
		if err := run(context.Background(), args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{{"0", 1}, {"0-1", 2}, {"0-3,8", 9}, {"0,2-5", 6}} {
		if got, err := parseCPUList(tt.in); err != nil || got != tt.want {
			t.Errorf("parseCPUList(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "x", "0-y"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = nil error", bad)
		}
	}
}

func TestNotice(t *testing.T) {
	r := result{Result: syncjob.Result{WaitNs: 3000}, kernelNs: 4000, launches: 2}
	if got := notice(r); got != 1000 {
		t.Errorf("notice(%+v) = %d, want 1000", r, got)
	}
	r = result{Result: syncjob.Result{WaitNs: 1000}, kernelNs: 4000, launches: 1}
	if got := notice(r); got != 0 {
		t.Errorf("notice(%+v) = %d, want 0 (never negative)", r, got)
	}
}
