package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelp: -h, --help and help [COMMAND] print usage on stdout and
// succeed, as Unix tools do.
func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "commands:"},
		{[]string{"--help"}, "commands:"},
		{[]string{"help"}, "commands:"},
		{[]string{"help", "migrate"}, "migrate UUID -to HOST:PORT"},
		{[]string{"migrate", "--help"}, "migrate UUID -to HOST:PORT"},
		{[]string{"help", "attach"}, "attach -libvirt DOMAIN UUID"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), c.args, &out, &errOut); err != nil {
			t.Errorf("%q: %v", c.args, err)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%q printed %q, want %q", c.args, out.String(), c.want)
		}
	}
	if err := run(context.Background(), []string{"help", "nosuch"}, new(bytes.Buffer), new(bytes.Buffer)); err == nil {
		t.Error("help nosuch succeeded")
	}
}
