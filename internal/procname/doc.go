// Package procname sets a process's name as ps and pgrep show it (comm),
// for the processes vgpud starts from its own binary (workers, executors,
// the connection keeper), which would otherwise all show as "exe". It owns
// nothing else and imports no other vgpud package.
package procname
