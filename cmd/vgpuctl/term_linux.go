package main

import (
	"os"

	"golang.org/x/sys/unix"
)

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// watchQuit puts the terminal on in into character mode without echo and
// calls quit when q or Q is typed. restore puts the terminal back. The
// reading goroutine ends with the process (a CLI's stdin stays open).
func watchQuit(in *os.File, quit func()) (restore func(), err error) {
	fd := int(in.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	go func() {
		b := make([]byte, 1)
		for {
			n, err := in.Read(b)
			if err != nil {
				return
			}
			if n == 1 && (b[0] == 'q' || b[0] == 'Q') {
				quit()
				return
			}
		}
	}()
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
