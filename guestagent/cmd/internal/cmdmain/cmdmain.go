// Package cmdmain is the main function the guest's commands share.
package cmdmain

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

// Main runs run with the process's arguments (those after its name) and a
// context that sigs cancel. An error is printed on stderr after the
// command's name and ends the process with status 1. sigs must name at
// least one signal: signal.NotifyContext with none would take every
// signal (SIGURG, SIGCHLD...) as the end.
func Main(name string, run func(ctx context.Context, args []string) error, sigs ...os.Signal) {
	if len(sigs) == 0 {
		panic("cmdmain.Main: no signal names the end")
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
