package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// lookupGroup is the group ID of name (a group name or a number).
func lookupGroup(name string) (int, error) {
	if gid, err := strconv.Atoi(name); err == nil && gid >= 0 {
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return -1, fmt.Errorf("socket group: %w (create it, e.g. addgroup --system %s, or leave socket_group unset)", err, name)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("socket group %s: gid %q: %w", name, g.Gid, err)
	}
	return gid, nil
}

// restrictSocket sets who may use the control socket sock in runDir:
// root alone (mode 0600) when gid is negative; else root and the group
// gid: the socket 0660 and the run directory 0750 (to reach it), both of
// that group. The files in the run directory stay root's (state.json and
// the lock are 0600, instances/ is 0700).
func restrictSocket(runDir, sock string, gid int) error {
	if gid < 0 {
		if err := os.Chmod(sock, 0o600); err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		return nil
	}
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{runDir, 0o750}, {sock, 0o660}} {
		if err := os.Chown(p.path, -1, gid); err != nil {
			return fmt.Errorf("control socket group: %w", err)
		}
		if err := os.Chmod(p.path, p.mode); err != nil {
			return fmt.Errorf("control socket group: %w", err)
		}
	}
	return nil
}
