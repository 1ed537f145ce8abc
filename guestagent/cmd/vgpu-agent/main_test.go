package main

import (
	"bytes"
	"context"
	"testing"
)

func TestBadFlag(t *testing.T) {
	var out, errb bytes.Buffer
	code, err := run(context.Background(), []string{"-nope"}, &out, &errb)
	if err == nil || code != 2 {
		t.Errorf("run(-nope) = %d, %v, want 2 and an error", code, err)
	}
}

// TestRunsCommandWithoutHost: with no port the command still runs after
// -wait, and its exit status is passed on.
func TestRunsCommandWithoutHost(t *testing.T) {
	var out, errb bytes.Buffer
	sock := t.TempDir() + "/relay.sock"
	code, err := run(context.Background(), []string{"-port", "no-such-port", "-socket", sock, "-wait", "1ms", "-stats", "0", "sh", "-c", "echo hi; exit 3"}, &out, &errb)
	if err != nil || code != 3 || out.String() != "hi\n" {
		t.Errorf("run() = %d, %v, stdout %q, want 3, nil, \"hi\\n\"\nstderr: %s", code, err, out.String(), errb.String())
	}
}
