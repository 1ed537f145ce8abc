package control

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/reuse"
)

// ReuseInfo is an instance's result-reuse domain and counters.
type ReuseInfo struct {
	Domain string `json:"domain"` // "" when reuse is off for the instance
	reuse.Snapshot
}

// ReuseReply lists the reuse domains and each instance's reuse state.
type ReuseReply struct {
	Domains   []mdev.ReuseDomainStatus `json:"domains"`
	Instances []InstanceReuse          `json:"instances"`
}

// InstanceReuse is one instance in a ReuseReply.
type InstanceReuse struct {
	UUID string `json:"uuid"`
	ReuseInfo
}

// BudgetBody pins a reuse domain's byte budget; a negative budget unpins
// it (it then takes an even share of the manager's budget).
type BudgetBody struct {
	Budget int64 `json:"budget"`
}

func reuseInfoOf(in *mdev.Instance) *ReuseInfo {
	return &ReuseInfo{Domain: in.ReuseDomain(), Snapshot: in.ReuseStats()}
}

// handleReuse adds the result-reuse endpoints:
//
//	GET /v1/reuse
//	PUT /v1/instances/{uuid}/reuse        {"domain": "team"} | {} (private) | {"off": true}
//	PUT /v1/reuse/domains/{name}/budget   {"budget": 67108864}
func handleReuse(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("GET /v1/reuse", func(w http.ResponseWriter, r *http.Request) {
		out := ReuseReply{Domains: m.ReuseDomains()}
		for _, in := range m.List() {
			out.Instances = append(out.Instances, InstanceReuse{UUID: in.UUID(), ReuseInfo: *reuseInfoOf(in)})
		}
		reply(w, http.StatusOK, out)
	})
	mux.HandleFunc("PUT /v1/instances/{uuid}/reuse", func(w http.ResponseWriter, r *http.Request) {
		var body mdev.ReuseSetting
		if err := decode(r, &body); err != nil {
			replyReuseErr(w, fmt.Errorf("set reuse: body: %w", err))
			return
		}
		id := r.PathValue("uuid")
		if err := m.SetReuse(id, body); err != nil {
			replyReuseErr(w, err)
			return
		}
		in, err := m.Get(id)
		if err != nil {
			replyReuseErr(w, err)
			return
		}
		reply(w, http.StatusOK, infoOf(in))
	})
	mux.HandleFunc("PUT /v1/reuse/domains/{name}/budget", func(w http.ResponseWriter, r *http.Request) {
		var body BudgetBody
		if err := decode(r, &body); err != nil {
			replyReuseErr(w, fmt.Errorf("set budget: body: %w", err))
			return
		}
		name := r.PathValue("name")
		if err := m.SetReuseBudget(name, body.Budget); err != nil {
			replyReuseErr(w, err)
			return
		}
		for _, d := range m.ReuseDomains() {
			if d.Name == name {
				reply(w, http.StatusOK, d)
				return
			}
		}
		replyReuseErr(w, fmt.Errorf("reuse domain %q: %w", name, mdev.ErrNoDomain))
	})
}

func replyReuseErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, mdev.ErrNoDomain):
		reply(w, http.StatusNotFound, errorBody{Error: err.Error()})
	case errors.Is(err, mdev.ErrReuseOff):
		reply(w, http.StatusConflict, errorBody{Error: err.Error()})
	default:
		replyErr(w, err)
	}
}
