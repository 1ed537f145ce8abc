package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/metrics"
)

// defaultMetricsAddr is where /metrics is served unless -metrics-addr says
// otherwise; loopback only, so nothing leaves the host by default.
const defaultMetricsAddr = "127.0.0.1:9400"

// metricsServer serves Prometheus metrics for m on addr until stop, and
// the health checks: /healthz (the process answers: 200), /readyz (the
// devices are open and the control socket serves: 200, else 503), and at
// / a short index of them.
type metricsServer struct {
	srv    *http.Server
	addr   net.Addr
	served chan error
	// ready is set while the control socket serves (setReady).
	ready atomic.Bool
}

// metricsIndex is what / answers.
const metricsIndex = `vgpud
/metrics  Prometheus metrics (vgpud_*, go_*, process_*, build info)
/healthz  200 while the process answers
/readyz   200 while the devices are open and the control socket serves, else 503
`

// startMetrics serves /metrics for m on l within lim (metricsLimits but
// in tests) until stop; /readyz answers 503 until setReady(true).
func startMetrics(l net.Listener, m *mdev.Manager, log *slog.Logger, lim httpLimits) *metricsServer {
	s := &metricsServer{served: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(m))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: the control socket does not serve (starting, stopping or upgrading)", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, metricsIndex)
	})
	srv, l := lim.serve(l, mux, m, log)
	s.srv, s.addr = srv, l.Addr()
	go func() { s.served <- s.srv.Serve(l) }()
	log.Info("serving metrics", "addr", "http://"+l.Addr().String()+"/metrics")
	return s
}

// setReady says whether the control socket serves (for /readyz).
func (s *metricsServer) setReady(ok bool) {
	if s != nil {
		s.ready.Store(ok)
	}
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
