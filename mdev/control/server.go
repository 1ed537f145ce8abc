package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/buildinfo"
	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/definitions"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/libvirt"
	"github.com/vgpud/vgpud/worker"
)

// maxBody bounds a request body.
const maxBody = 64 << 10

// Option configures Handler.
type Option func(*options)

type options struct {
	migrateTLS *migrate.TLS
	libvirt    *libvirt.Attacher
	xen        XenAttacher
	upgrade    Upgrader
	gate       *Gate
	events     *eventlog.Log
	defs       *definitions.Dir
}

// WithMigration enables POST /v1/instances/{uuid}/migrate, whose channel
// to the destination daemon authenticates with t (docs/migration.md).
func WithMigration(t *migrate.TLS) Option { return func(o *options) { o.migrateTLS = t } }

// Handler returns the API over m.
func Handler(m *mdev.Manager, opts ...Option) http.Handler {
	var o options
	for _, f := range opts {
		f(&o)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, buildinfo.Get("vgpud"))
	})
	mux.HandleFunc("GET /v1/devices", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, m.Devices())
	})
	mux.HandleFunc("GET /v1/profiles", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, m.Profiles())
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		list := m.List()
		out := make([]InstanceInfo, len(list))
		for i, in := range list {
			out[i] = infoOf(in)
		}
		reply(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		var req mdev.CreateRequest
		if err := decode(r, &req); err != nil {
			replyErr(w, fmt.Errorf("create: body: %w", err))
			return
		}
		in, err := m.Create(req)
		if err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusCreated, infoOf(in))
	})
	mux.HandleFunc("GET /v1/instances/{uuid}", func(w http.ResponseWriter, r *http.Request) {
		in, err := m.Get(r.PathValue("uuid"))
		if err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusOK, infoOf(in))
	})
	mux.HandleFunc("DELETE /v1/instances/{uuid}", func(w http.ResponseWriter, r *http.Request) {
		if err := m.Destroy(r.PathValue("uuid")); err != nil {
			replyErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	handleSched(mux, m)
	handleProfile(mux, m)
	handleLimits(mux, m)
	handleReuse(mux, m)
	handlePlacement(mux, m)
	handleRealloc(mux, m)
	handleMigrate(mux, m, o.migrateTLS, o.libvirt)
	handleReattach(mux, m)
	handleAttach(mux, o.libvirt)
	handleXen(mux, o.xen)
	handleEvents(mux, o.events)
	handleDefinitions(mux, m, o.defs)
	if o.upgrade != nil {
		handleUpgrade(mux, o.upgrade)
	}
	var h http.Handler = byName(m, mux)
	if o.gate != nil {
		return gated(o.gate, h)
	}
	return h
}

// byName lets an instance's name stand for its UUID in every
// /v1/instances/{uuid}... path: it rewrites the path to the UUID the
// manager resolves (mdev.Manager.Resolve) and leaves anything else, an
// unknown name included, to the handlers.
func byName(m *mdev.Manager, next http.Handler) http.Handler {
	const prefix = "/v1/instances/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		ref, tail, _ := strings.Cut(rest, "/")
		if ok && ref != "" {
			if id, err := m.Resolve(ref); err == nil && id != ref {
				r = r.Clone(r.Context())
				r.URL.Path = prefix + id
				if tail != "" || strings.HasSuffix(rest, "/") {
					r.URL.Path += "/" + tail
				}
				r.URL.RawPath = ""
			}
		}
		next.ServeHTTP(w, r)
	})
}

type errorBody struct {
	Error string `json:"error"`
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // a failed write means the client went away
}

func replyErr(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	switch {
	case errors.Is(err, mdev.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, mdev.ErrExists), errors.Is(err, mdev.ErrNoCapacity), abi.StatusOf(err) == abi.StatusBusy:
		code = http.StatusConflict
	case errors.Is(err, mdev.ErrManagerClosed), errors.Is(err, worker.ErrLost), errors.Is(err, worker.ErrWorker),
		abi.StatusOf(err) == abi.StatusDeviceLost:
		code = http.StatusServiceUnavailable
	}
	reply(w, code, errorBody{Error: err.Error()})
}

// replyUnavailable answers 503 Service Unavailable with err: a part of
// vgpud that this request needs is not set up, or no longer serves.
func replyUnavailable(w http.ResponseWriter, err error) {
	reply(w, http.StatusServiceUnavailable, errorBody{Error: err.Error()})
}

// detachedContext is r's context without its cancellation, bounded by
// timeout: for work an operator that gives up (or whose connection drops)
// must not leave half done.
func detachedContext(r *http.Request, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
}

// errTrailing: a request body has more after its JSON value.
var errTrailing = errors.New("trailing data after the JSON body")

// decode reads a request body of at most maxBody bytes holding exactly one
// JSON value with no unknown fields into v.
func decode(r *http.Request, v any) error { return decodeLimit(r, v, maxBody) }

// decodeLimit is decode with a body of at most limit bytes.
func decodeLimit(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailing
	}
	return nil
}
