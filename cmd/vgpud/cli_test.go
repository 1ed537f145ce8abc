package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCommandLine: -h prints the flags on stdout and succeeds, -version
// the build; a bad flag or an argument is one line with a hint
// (errBadUsage: exit 2).
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // on stdout; "" with an error
		err  string
	}{
		{[]string{"-h"}, "-metrics-addr string", ""},
		{[]string{"--help"}, "-run-dir string", ""},
		{[]string{"-version"}, "vgpud ", ""},
		{[]string{"-bogus"}, "", "vgpud -h lists the flags"},
		{[]string{"extra"}, "", `unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), c.args, &out, &errOut)
		if c.err == "" {
			if err != nil || !strings.Contains(out.String(), c.want) || errOut.Len() != 0 {
				t.Errorf("%q = %v, stdout %q, stderr %q", c.args, err, out.String(), errOut.String())
			}
			continue
		}
		if !errors.Is(err, errBadUsage) || !strings.Contains(err.Error(), c.err) || errOut.Len() != 0 {
			t.Errorf("%q = %v (stderr %q), want errBadUsage saying %q", c.args, err, errOut.String(), c.err)
		}
	}
}
