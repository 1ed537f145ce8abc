package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/vgpud/vgpud/internal/accept"
	"github.com/vgpud/vgpud/mdev"
)

// httpLimits bound one HTTP listener of vgpud (docs/operating.md
// "Listener limits"): a flood of connections that never send a byte, or
// of idle keep-alive clients, holds at most MaxConns descriptors, each
// for at most Header (a request's header) or Idle (between requests).
type httpLimits struct {
	Name     string
	MaxConns int
	// Header bounds reading a request's header, from the connection's
	// start or its first byte after an idle wait.
	Header time.Duration
	// Idle bounds a keep-alive connection's wait for its next request.
	Idle time.Duration
	// Read and Write bound reading a whole request and writing its
	// response; 0: none (the control API's migrations and upgrades take
	// minutes).
	Read, Write time.Duration
	// MaxHeaderBytes bounds a request's header.
	MaxHeaderBytes int
}

var (
	// controlLimits: the control socket is the operator's (mode 0600);
	// its requests may take minutes, so only the header and idle waits
	// are bounded.
	controlLimits = httpLimits{Name: "control", MaxConns: 64, Header: 10 * time.Second, Idle: time.Minute, MaxHeaderBytes: 64 << 10}
	// metricsLimits: any local user reaches /metrics, a GET that answers
	// at once.
	metricsLimits = httpLimits{Name: "metrics", MaxConns: 32, Header: 10 * time.Second, Idle: 30 * time.Second,
		Read: 10 * time.Second, Write: 30 * time.Second, MaxHeaderBytes: 16 << 10}
)

// serve returns a server for h with lim's timeouts and l limited to
// lim.MaxConns connections (refusals counted by m, logged to log).
func (lim httpLimits) serve(l net.Listener, h http.Handler, m *mdev.Manager, log *slog.Logger) (*http.Server, net.Listener) {
	g := &accept.Limit{Max: lim.MaxConns, Name: lim.Name, Logger: log}
	if m != nil {
		g.OnRefuse = m.RefuseConn
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.Header, IdleTimeout: lim.Idle,
		ReadTimeout: lim.Read, WriteTimeout: lim.Write, MaxHeaderBytes: lim.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	return srv, g.Listener(l)
}
