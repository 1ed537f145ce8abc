package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/metrics"
)

// defaultMetricsAddr is where /metrics is served unless -metrics-addr says
// otherwise; loopback only, so nothing leaves the host by default.
const defaultMetricsAddr = "127.0.0.1:9400"

// metricsServer serves Prometheus metrics for m on addr until stop.
type metricsServer struct {
	srv    *http.Server
	addr   net.Addr
	served chan error
}

// startMetrics serves /metrics for m on l within lim (metricsLimits but
// in tests) until stop.
func startMetrics(l net.Listener, m *mdev.Manager, log *slog.Logger, lim httpLimits) *metricsServer {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(m))
	srv, l := lim.serve(l, mux, m, log)
	s := &metricsServer{
		srv:    srv,
		addr:   l.Addr(),
		served: make(chan error, 1),
	}
	go func() { s.served <- s.srv.Serve(l) }()
	log.Info("serving metrics", "addr", "http://"+l.Addr().String()+"/metrics")
	return s
}

// stop shuts the server down gracefully within ctx.
func (s *metricsServer) stop(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
