package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
)

// testManager is a manager on the first device; it and the device close
// when the test ends.
func testManager(t *testing.T) *mdev.Manager {
	t.Helper()
	d, err := gpu.Open("")
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestMetricsServer serves /metrics on an ephemeral loopback port, reads
// the device series and shuts down gracefully.
func TestMetricsServer(t *testing.T) {
	m := testManager(t)
	if _, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := startMetrics(l, m, slog.New(slog.NewTextHandler(io.Discard, nil)), metricsLimits)
	hc := &http.Client{Transport: &http.Transport{}}
	resp, err := hc.Get("http://" + s.addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	hc.CloseIdleConnections()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", resp.StatusCode, err)
	}
	for _, want := range []string{`vgpud_device_policy{device="0",policy="fixed-share"} 1`, `vgpud_instance_share{`,
		"go_goroutines ", "process_cpu_seconds_total ", "go_build_info{", "vgpud_build_info{"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("GET /metrics lacks %q:\n%s", want, b)
		}
	}
	if err := s.stop(context.Background()); err != nil {
		t.Errorf("stop() = %v", err)
	}
}

// TestHealthEndpoints: /healthz answers 200 while the process does,
// /readyz 503 until the control socket serves and 200 then, / an index.
func TestHealthEndpoints(t *testing.T) {
	m := testManager(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := startMetrics(l, m, slog.New(slog.NewTextHandler(io.Discard, nil)), metricsLimits)
	defer s.stop(context.Background())
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + s.addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		ready bool
		path  string
		code  int
		want  string
	}{
		{false, "/healthz", 200, "ok"},
		{false, "/readyz", 503, "not ready"},
		{true, "/readyz", 200, "ok"},
		{true, "/", 200, "/readyz"},
		{true, "/nosuch", 404, ""},
		{false, "/readyz", 503, "not ready"},
	} {
		s.setReady(c.ready)
		if code, body := get(c.path); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("ready %v: GET %s = %d %q, want %d %q", c.ready, c.path, code, body, c.code, c.want)
		}
	}
}
