package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kernel command-line parameters vgpu-init reads (docs/guest-image.md).
const (
	paramRun  = "vgpu.run"  // program under /bin to run
	paramArgs = "vgpu.args" // its arguments, comma separated
	paramKlog = "vgpu.klog" // keep kernel messages on the console
	paramWait = "vgpu.wait" // wait this long for a hot-plugged vGPU first
)

// maxWait bounds vgpu.wait.
const maxWait = time.Hour

// maxArgs bounds the argument count; a kernel command line is at most a
// few KiB anyway.
const maxArgs = 256

// config is what the kernel command line asks of the init.
type config struct {
	Run  string   // program name, run as /bin/<Run>
	Args []string // its arguments
	Klog bool     // keep the kernel's console log level
	// Wait is how long to wait for a vGPU on the PCI bus before running
	// the program (0: do not wait).
	Wait time.Duration
}

var errNoRun = errors.New("no " + paramRun + "=<program> on the kernel command line")

// parseCmdline reads the vgpu.* parameters from the contents of
// /proc/cmdline. Words split on white space, double quotes group (as the
// kernel does: `vgpu.args="a b,c"` gives the arguments "a b" and "c").
// vgpu.args is split on commas; an empty value means no arguments. The last
// occurrence of a parameter wins.
func parseCmdline(s string) (config, error) {
	var c config
	for _, w := range splitWords(s) {
		key, val, hasVal := strings.Cut(w, "=")
		switch key {
		case paramRun:
			c.Run = val
		case paramArgs:
			c.Args = nil
			if val != "" {
				c.Args = strings.Split(val, ",")
			}
		case paramKlog:
			c.Klog = !hasVal || (val != "0" && val != "off" && val != "n")
		case paramWait:
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > maxWait {
				return config{}, fmt.Errorf("%s=%q: want a duration from 0 to %v, e.g. 2m", paramWait, val, maxWait)
			}
			c.Wait = d
		}
	}
	if c.Run == "" {
		return config{}, errNoRun
	}
	if strings.Contains(c.Run, "/") || c.Run == "." || c.Run == ".." {
		return config{}, fmt.Errorf("%s=%q: want a plain program name under /bin", paramRun, c.Run)
	}
	if len(c.Args) > maxArgs {
		return config{}, fmt.Errorf("%s: %d arguments, want at most %d", paramArgs, len(c.Args), maxArgs)
	}
	return c, nil
}

// splitWords splits a kernel command line into parameters: white space
// separates, double quotes protect white space and are removed.
func splitWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
