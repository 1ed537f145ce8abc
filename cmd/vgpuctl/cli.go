package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/vgpud/vgpud/internal/buildinfo"
	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/mdev/control"
)

// errUsage marks a command line vgpuctl cannot run (an unknown command, a
// bad flag, an argument too many): vgpuctl exits 2 for it, as Unix tools
// do, and 1 for an error of the daemon or the system.
var errUsage = errors.New("usage")

// usageError is a command-line error: its message, then a hint where the
// whole story is.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

// usagef is a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// helpWriter is the stderr run hands a command when asked for its help
// (vgpuctl CMD -h): the command parses just -h, and its flag set prints
// its usage there.
type helpWriter struct{ io.Writer }

// newFlags is a subcommand's flag set. Asked for help (stderr a
// helpWriter), it prints the command's lines of vgpuctl help and its
// flags with their one-line help; a bad flag is only returned (run says
// it in one line with a hint).
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if hw, ok := stderr.(helpWriter); ok {
		fs.Usage = func() { printCmdUsage(hw.Writer, name, fs) }
	}
	return fs
}

// isFlagError reports whether err is the flag package's complaint about
// a command line (its errors have no type of their own).
func isFlagError(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"flag provided but not defined", "invalid value ", "invalid boolean value ", "flag needs an argument", "bad flag syntax"} {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// printCmdUsage prints name's lines of the usage and fs's flags.
func printCmdUsage(w io.Writer, name string, fs *flag.FlagSet) {
	if lines := helpLines(name); len(lines) > 0 {
		fmt.Fprintln(w, "usage: vgpuctl [-socket PATH]", strings.TrimSpace(strings.Join(lines, "\n")))
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintln(w, "\n(no flags)")
		return
	}
	fmt.Fprintln(w, "\nflags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// helpLines are the lines of usage that describe command name.
func helpLines(name string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(usage, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && t != "":
			in = strings.Fields(t)[0] == name
		case !strings.HasPrefix(line, "   "):
			in = false
		}
		if in {
			out = append(out, line)
		}
	}
	return out
}

// versionCmd prints vgpuctl's build and the daemon's (without -client).
func versionCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	client := fs.Bool("client", false, "only vgpuctl's own build (no vgpud needed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("version: unexpected argument %q", fs.Arg(0))
	}
	out := struct {
		Client buildinfo.Info  `json:"client"`
		Daemon *buildinfo.Info `json:"daemon,omitempty"`
	}{Client: buildinfo.Get("vgpuctl")}
	var err error
	if !*client {
		var d buildinfo.Info
		if d, err = c.Version(ctx); err == nil {
			out.Daemon = &d
		}
	}
	if *asJSON {
		if perr := printJSON(w, out); perr != nil {
			return perr
		}
		return err
	}
	fmt.Fprintln(w, out.Client)
	if out.Daemon != nil {
		fmt.Fprintln(w, out.Daemon)
	}
	return err
}

// labelFlags collects -label KEY=VALUE flags.
type labelFlags map[string]string

func (l labelFlags) String() string {
	var kv []string
	for k, v := range l {
		kv = append(kv, k+"="+v)
	}
	return strings.Join(kv, ",")
}

func (l labelFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q: want KEY=VALUE", s)
	}
	if _, dup := l[k]; dup {
		return fmt.Errorf("label %s given twice", k)
	}
	l[k] = v
	return nil
}

// orDash is s, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// eventsCmd prints the daemon's recent events as JSON lines, and with
// -follow each new one until ctrl-c or the daemon stops.
func eventsCmd(ctx context.Context, c *control.Client, args []string, w, stderr io.Writer) error {
	fs := newFlags("events", stderr)
	follow := fs.Bool("follow", false, "after the recent events, print each new one as it happens (until ctrl-c or vgpud stops)")
	since := fs.Uint64("since", 0, "only events numbered this or later (an event's seq)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("events: unexpected argument %q", fs.Arg(0))
	}
	enc := json.NewEncoder(w)
	err := c.Events(ctx, *since, *follow, func(e eventlog.Event) error { return enc.Encode(e) })
	if ctx.Err() != nil {
		return nil // ctrl-c: the end a follower expects
	}
	return err
}
