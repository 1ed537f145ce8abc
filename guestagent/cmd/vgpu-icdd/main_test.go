package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// TestRun serves two fake vGPUs on a socket, answers a Hello and stops on
// cancellation, removing the socket.
func TestRun(t *testing.T) {
	findDevices = func() ([]string, error) { return []string{"fake0", "fake1"}, nil }
	openDevice = func(string) (driver.Registers, driver.Memory, error) {
		f := drivertest.New(drivertest.Config{}, nil)
		return f, f, nil
	}
	sock := filepath.Join(t.TempDir(), "run", "icd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-socket", sock, "-mode", "0600", "-agent", "none", "-staging", "0"}, &stderr)
	}()
	var c net.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if c, err = net.Dial("unixpacket", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("daemon did not listen: %v\n%s", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	b, _ := icdproto.Marshal(icdproto.OpHello, 1, &icdproto.Hello{Version: icdproto.Version})
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, icdproto.MaxMessage)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	_, body, err := icdproto.Unmarshal(buf[:n])
	if r, ok := body.(*icdproto.HelloReply); err != nil || !ok || len(r.Devices) != 2 {
		t.Errorf("hello reply %+v, %v; want 2 devices", body, err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("run() = %v\n%s", err, stderr.String())
	}
	c.Close()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestRunRejects(t *testing.T) {
	for _, args := range [][]string{{"-mode", "9"}, {"-agent", "carrier-pigeon"}, {"extra"}, {"-group", "no-such-group-here"}} {
		if err := run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
