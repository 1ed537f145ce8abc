package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/vgpud/vgpud/mdev"
)

// ProfileBody names a vGPU type.
type ProfileBody struct {
	Profile string `json:"profile"`
}

// handleProfile adds
//
//	PUT /v1/instances/{uuid}/profile    {"profile": "vgpu-medium"}
//
// which moves an instance, VM attached, to another vGPU type.
func handleProfile(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("PUT /v1/instances/{uuid}/profile", func(w http.ResponseWriter, r *http.Request) {
		var body ProfileBody
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			replyErr(w, fmt.Errorf("set profile: body: %w", err))
			return
		}
		id := r.PathValue("uuid")
		if err := m.SetProfile(id, body.Profile); err != nil {
			replyErr(w, err)
			return
		}
		in, err := m.Get(id)
		if err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusOK, infoOf(in))
	})
}

// handleLimits adds
//
//	PUT /v1/instances/{uuid}/limits    {"turn_timeout": "5s", "build_timeout": "30s", "program_bytes": N}
//
// which changes an instance's time budgets and program quota (fields
// left out keep their value).
func handleLimits(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("PUT /v1/instances/{uuid}/limits", func(w http.ResponseWriter, r *http.Request) {
		var body mdev.Limits
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			replyErr(w, fmt.Errorf("set limits: body: %w", err))
			return
		}
		id := r.PathValue("uuid")
		if err := m.SetLimits(id, body); err != nil {
			replyErr(w, err)
			return
		}
		in, err := m.Get(id)
		if err != nil {
			replyErr(w, err)
			return
		}
		reply(w, http.StatusOK, infoOf(in))
	})
}

// SetLimits changes an instance's time budgets and program quota.
func (c *Client) SetLimits(ctx context.Context, id string, l mdev.Limits) (InstanceInfo, error) {
	var out InstanceInfo
	return out, c.do(ctx, http.MethodPut, "/v1/instances/"+url.PathEscape(id)+"/limits", l, &out)
}

// SetProfile moves an instance to another vGPU type.
func (c *Client) SetProfile(ctx context.Context, id, profile string) (InstanceInfo, error) {
	var out InstanceInfo
	return out, c.do(ctx, http.MethodPut, "/v1/instances/"+url.PathEscape(id)+"/profile", ProfileBody{Profile: profile}, &out)
}
