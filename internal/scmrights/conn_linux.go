package scmrights

import (
	"fmt"
	"net"
	"os"
)

// UnixConn makes a connection of fd, a Unix socket that arrived (or a
// duplicate of one): the connection holds a descriptor of its own, and fd
// is closed whatever happens. name says what the socket is, in errors.
func UnixConn(fd int, name string) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FileConn duplicates it
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s: %T is not a unix socket", name, c)
	}
	return uc, nil
}
