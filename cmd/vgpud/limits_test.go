package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/internal/fdtest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// floodConns opens n loopback connections to addr that never send a byte
// and returns a channel that receives one value for each the server
// closes (one it keeps open is never reported). The connections are
// closed when the test ends.
func floodConns(t *testing.T, network, addr string, n int) ([]net.Conn, <-chan int) {
	t.Helper()
	conns := make([]net.Conn, n)
	closed := make(chan int, n)
	for i := range conns {
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatalf("flood connection %d to %s: %v", i, addr, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		go func() {
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			_, err := io.Copy(io.Discard, c)
			if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
				closed <- i // EOF or a reset: the server closed it
			}
		}()
	}
	return conns, closed
}

// waitClosed waits for n values from closed and returns them, failing
// the test after a budget far longer than any timeout under test.
func waitClosed(t *testing.T, closed <-chan int, n int, what string) map[int]bool {
	t.Helper()
	got := map[int]bool{}
	budget := time.NewTimer(60 * time.Second)
	defer budget.Stop()
	for len(got) < n {
		select {
		case i := <-closed:
			got[i] = true
		case <-budget.C:
			t.Fatalf("%s: %d connections closed by the server, want %d", what, len(got), n)
		}
	}
	return got
}

// testMetrics serves /metrics within lim on a loopback port until the
// test ends.
func testMetrics(t *testing.T, lim httpLimits) string {
	t.Helper()
	m := testManager(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := startMetrics(l, m, slog.New(slog.NewTextHandler(io.Discard, nil)), lim)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.stop(ctx) // idle flood connections: Shutdown may give up on them
	})
	return s.addr.String()
}

// TestMetricsLimits: /metrics closes the connections over its limit at
// once, a connection that sends nothing after Header, and a keep-alive
// client that stays idle after Idle.
func TestMetricsLimits(t *testing.T) {
	const long = 10 * time.Minute
	for _, tc := range []struct {
		name string
		lim  httpLimits
		// flood connections, of which want are closed by the server
		flood, want int
		// keepAlive: one request, then the client stays idle
		keepAlive bool
	}{
		{"over the limit", httpLimits{Name: "metrics", MaxConns: 4, Header: long, Idle: long}, 12, 8, false},
		{"silent", httpLimits{Name: "metrics", MaxConns: 4, Header: 200 * time.Millisecond, Idle: long}, 4, 4, false},
		{"idle keep-alive", httpLimits{Name: "metrics", MaxConns: 4, Header: long, Idle: 200 * time.Millisecond}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := testMetrics(t, tc.lim)
			conns, closed := floodConns(t, "tcp", addr, tc.flood)
			refused := waitClosed(t, closed, tc.want, "flood")
			for i, c := range conns {
				if !refused[i] {
					c.Close()
				}
			}
			if tc.keepAlive {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: vgpud\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("GET /metrics: %v", err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Close {
					t.Fatalf("GET /metrics = %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
				}
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
					t.Errorf("an idle keep-alive client: read = %v, want EOF (closed after Idle)", err)
				}
			}
			// The places come free: a scrape gets through.
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
			var err error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var resp *http.Response
				if resp, err = hc.Get("http://" + addr + "/metrics"); err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = errors.New(resp.Status)
					}
					break
				}
			}
			if err != nil {
				t.Errorf("GET /metrics after the flood: %v", err)
			}
		})
	}
}

// TestDaemonSurvivesFlood: while 3x their limits of silent connections
// flood the metrics and migration listeners, and idle keep-alive clients
// hold /metrics, the daemon holds at most the limits' worth of extra
// descriptors and the control API still creates an instance.
func TestDaemonSurvivesFlood(t *testing.T) {
	tlsDir := migratetest.NewCA(t).HostDir(t)
	ready, _ := daemonReady(t, filepath.Join(t.TempDir(), "run"), "-metrics-addr", "127.0.0.1:0",
		"-migrate-tls", tlsDir, "-migrate-listen", "127.0.0.1:0")
	ctl := control.NewClient(ready["control"])
	ctx := context.Background()
	if _, err := ctl.Devices(ctx); err != nil {
		t.Fatal(err)
	}
	migAddr := ready["migrate"]
	metricsAddr := strings.TrimSuffix(strings.TrimPrefix(ready["metrics"], "http://"), "/metrics")
	before := fdtest.Open(t)
	nMetrics, nMig := 3*metricsLimits.MaxConns, 3*migrate.DefaultMaxConns
	_, mclosed := floodConns(t, "tcp", metricsAddr, nMetrics)
	_, gclosed := floodConns(t, "tcp", migAddr, nMig)
	waitClosed(t, mclosed, nMetrics-metricsLimits.MaxConns, "metrics flood")
	waitClosed(t, gclosed, nMig-migrate.DefaultMaxConns, "migration flood")
	// This process holds both ends: the flood's client ends, the
	// daemon's server ends (at most the limits) and a few of its own.
	const slack = 16
	if got, most := fdtest.Open(t)-before, nMetrics+nMig+metricsLimits.MaxConns+migrate.DefaultMaxConns+slack; got > most {
		t.Errorf("%d more descriptors open during the flood, want at most %d", got, most)
	}
	info, err := ctl.Create(ctx, mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatalf("Create during the flood = %v, want an instance", err)
	}
	if err := ctl.Destroy(ctx, info.UUID); err != nil {
		t.Errorf("Destroy(%s) during the flood = %v", info.UUID, err)
	}
}

// TestControlLimits: the control socket closes the connections over its
// limit at once (the header timeout is far away); once the others are
// gone the API answers again.
func TestControlLimits(t *testing.T) {
	old := controlLimits
	controlLimits.MaxConns, controlLimits.Header = 4, 10*time.Minute
	t.Cleanup(func() { controlLimits = old })
	ready, _ := daemonReady(t, filepath.Join(t.TempDir(), "run"))
	const n = 12
	conns, closed := floodConns(t, "unix", ready["control"], n)
	refused := waitClosed(t, closed, n-controlLimits.MaxConns, "control flood")
	for i, c := range conns {
		if !refused[i] {
			c.Close()
		}
	}
	ctl := control.NewClient(ready["control"])
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err = ctl.Devices(context.Background()); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("Devices after the flood = %v", err)
	}
}
