package control

import (
	"context"
	"fmt"
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
	putOnInstance(mux, m, "profile", "set profile", func(id string, body ProfileBody) error {
		return m.SetProfile(id, body.Profile)
	})
}

// handleLimits adds
//
//	PUT /v1/instances/{uuid}/limits    {"kernel_timeout": "5m", "slice": "250ms", "build_timeout": "30s", "program_bytes": N}
//
// which changes an instance's time budgets and program quota (fields
// left out keep their value; "turn_timeout" is kernel_timeout's former
// name, still accepted).
func handleLimits(mux *http.ServeMux, m *mdev.Manager) {
	putOnInstance(mux, m, "limits", "set limits", m.SetLimits)
}

// putOnInstance adds PUT /v1/instances/{uuid}/<what>: the body (JSON of
// T, unknown fields refused) is applied to the instance, and the reply is
// the instance as it is then.
func putOnInstance[T any](mux *http.ServeMux, m *mdev.Manager, what, op string, apply func(id string, body T) error) {
	mux.HandleFunc("PUT /v1/instances/{uuid}/"+what, func(w http.ResponseWriter, r *http.Request) {
		var body T
		if err := decode(r, &body); err != nil {
			replyErr(w, fmt.Errorf("%s: body: %w", op, err))
			return
		}
		id := r.PathValue("uuid")
		if err := apply(id, body); err != nil {
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
