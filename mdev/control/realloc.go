package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/vgpud/vgpud/mdev"
)

// handleRealloc adds the overcommit and reallocation API
// (docs/overcommit.md):
//
//	POST /v1/instances/{uuid}/realloc      {"device": 1, "profile": "vgpu-small", "deadline": "30s"}
//	GET  /v1/instances/{uuid}/resources
//	PUT  /v1/instances/{uuid}/overcommit   {"policy": "migrate", "timeout": "30s"}
//	PUT  /v1/profiles/{name}/overcommit    {"policy": "block"}
//	GET  /v1/proposals?window=10m
func handleRealloc(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("POST /v1/instances/{uuid}/realloc", func(w http.ResponseWriter, r *http.Request) {
		var req mdev.ReallocRequest
		if err := decode(r, &req); err != nil {
			replyErr(w, fmt.Errorf("realloc: body: %w", err))
			return
		}
		res, err := m.Realloc(r.Context(), r.PathValue("uuid"), req)
		if err != nil {
			code := http.StatusBadRequest
			switch {
			case errors.Is(err, mdev.ErrNotFound):
				code = http.StatusNotFound
			case errors.Is(err, mdev.ErrReallocRefused), errors.Is(err, mdev.ErrReallocating), errors.Is(err, mdev.ErrNoCapacity):
				code = http.StatusConflict
			}
			reply(w, code, errorBody{Error: err.Error()})
			return
		}
		reply(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /v1/instances/{uuid}/resources", func(w http.ResponseWriter, r *http.Request) {
		res, err := m.Resources(r.PathValue("uuid"))
		if err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusOK, res)
	})
	putOnInstance(mux, m, "overcommit", "set overcommit", m.SetOvercommit)
	mux.HandleFunc("PUT /v1/profiles/{name}/overcommit", func(w http.ResponseWriter, r *http.Request) {
		var o mdev.Overcommit
		if err := decode(r, &o); err != nil {
			replyErr(w, fmt.Errorf("set profile overcommit: body: %w", err))
			return
		}
		if err := m.SetProfileOvercommit(r.PathValue("name"), o); err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusOK, m.Profiles())
	})
	mux.HandleFunc("GET /v1/proposals", func(w http.ResponseWriter, r *http.Request) {
		window := time.Duration(0)
		if s := r.URL.Query().Get("window"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				replyErr(w, fmt.Errorf("proposals: window %q: want a duration like 10m", s))
				return
			}
			window = d
		}
		out := m.Proposals(window)
		if out == nil {
			out = []mdev.DowngradeProposal{}
		}
		reply(w, http.StatusOK, out)
	})
}

// Realloc moves an instance to another device or profile (mdev.Realloc).
func (c *Client) Realloc(ctx context.Context, id string, req mdev.ReallocRequest) (mdev.ReallocResult, error) {
	var out mdev.ReallocResult
	return out, c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/realloc", req, &out)
}

// Resources shows what an instance's guest programs declared and what it
// holds.
func (c *Client) Resources(ctx context.Context, id string) (mdev.Resources, error) {
	var out mdev.Resources
	return out, c.do(ctx, http.MethodGet, "/v1/instances/"+url.PathEscape(id)+"/resources", nil, &out)
}

// SetOvercommit sets an instance's overcommit policy.
func (c *Client) SetOvercommit(ctx context.Context, id string, o mdev.Overcommit) error {
	return c.do(ctx, http.MethodPut, "/v1/instances/"+url.PathEscape(id)+"/overcommit", o, nil)
}

// SetProfileOvercommit sets a profile's default overcommit policy.
func (c *Client) SetProfileOvercommit(ctx context.Context, profile string, o mdev.Overcommit) error {
	return c.do(ctx, http.MethodPut, "/v1/profiles/"+url.PathEscape(profile)+"/overcommit", o, nil)
}

// Proposals lists the downgrades the policy proposes for instances whose
// peak stayed below a smaller profile for at least window.
func (c *Client) Proposals(ctx context.Context, window time.Duration) ([]mdev.DowngradeProposal, error) {
	var out []mdev.DowngradeProposal
	return out, c.do(ctx, http.MethodGet, "/v1/proposals?window="+url.QueryEscape(window.String()), nil, &out)
}
