package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// TestGracefulStop: on SIGTERM (its context ending) vgpud tells the
// guest agent it is stopping, with the drain time, and returns even though
// a guest kernel never ends and its turn budget is far away: the drain is
// bounded and the worker is stopped.
func TestGracefulStop(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "vgpud.json")
	if err := os.WriteFile(cfg, []byte(`{"profiles": [{"name": "long", "mem_bytes": 16777216, "share": 1, "max_per_device": 2, "turn_timeout": "10m"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, _, stop := daemonOn(t, filepath.Join(dir, "run"), "-config", cfg, "-stop-drain", "300ms")
	in, err := control.NewClient(sock).Create(context.Background(), mdev.CreateRequest{Profile: "long"})
	if err != nil {
		t.Fatal(err)
	}
	// The guest agent, as QEMU's chardev relays it.
	ac, err := net.Dial("unix", strings.TrimSuffix(in.Socket, ".sock")+".agent.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if _, err := ac.Write(agentmsg.Marshal(&agentmsg.Hello{MinVersion: 1, MaxVersion: 1, Ident: "test"})); err != nil {
		t.Fatal(err)
	}
	// A guest whose kernel never ends.
	_, d := openGuest(t, in.Socket, driver.Options{Timeout: time.Minute})
	p, _, err := d.Build(`__kernel void hold(__global volatile int *o) { while (o[1] == 0) { o[0]++; } }`, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.CreateBuffer(64)
	if err := d.Write(b, 0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "hold", driver.Range1(1, 0), driver.BufferArg(b)); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	// Wait until the endless launch holds the device.
	for c := control.NewClient(sock); ; time.Sleep(time.Millisecond) {
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Devices) > 0 && st.Devices[0].Holder == in.UUID {
			break
		}
	}

	stop() // SIGTERM; run must return nil
	r := agentmsg.NewReader(ac)
	ac.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		m, err := r.Read()
		if err != nil {
			t.Fatalf("the agent was not told vgpud is stopping: %v", err)
		}
		if s, ok := m.(*agentmsg.Stopping); ok {
			if s.DrainMs != 300 {
				t.Errorf("Stopping drain %d ms, want 300", s.DrainMs)
			}
			break
		}
	}
}
