package control

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/sched"
)

// PolicyBody is a device's scheduling policy.
type PolicyBody struct {
	Device int    `json:"device"`
	Policy string `json:"policy"`
}

// ShareBody is an instance's fixed-share weight.
type ShareBody struct {
	Share uint32 `json:"share"`
}

// DeviceStats is one physical device in a StatsReply.
type DeviceStats struct {
	Index     int    `json:"index"`
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	sched.Stats
}

// InstanceStats is one instance in a StatsReply.
type InstanceStats struct {
	InstanceInfo
	Sched sched.ClientStats `json:"sched"`
}

// StatsReply is a snapshot of every device's scheduler and every
// instance's counters, taken at Time.
type StatsReply struct {
	Time      time.Time       `json:"time"`
	Devices   []DeviceStats   `json:"devices"`
	Instances []InstanceStats `json:"instances"`
}

// Snapshot takes a StatsReply from m.
func Snapshot(m *mdev.Manager) StatsReply {
	out := StatsReply{Time: time.Now()}
	for _, d := range m.Devices() {
		ds := DeviceStats{Index: d.Index, Name: d.Name, Instances: d.Instances}
		if s, err := m.Sched(d.Index); err == nil {
			ds.Stats = s
			ds.Clients = nil // per instance below
		}
		out.Devices = append(out.Devices, ds)
	}
	for _, in := range m.List() {
		out.Instances = append(out.Instances, InstanceStats{InstanceInfo: infoOf(in), Sched: in.Sched()})
	}
	return out
}

// handleSched adds the scheduling endpoints:
//
//	GET /v1/stats
//	GET /v1/devices/{index}/policy
//	PUT /v1/devices/{index}/policy      {"policy": "fixed-share"}
//	PUT /v1/instances/{uuid}/share      {"share": 3}
func handleSched(mux *http.ServeMux, m *mdev.Manager) {
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, Snapshot(m))
	})
	mux.HandleFunc("GET /v1/devices/{index}/policy", func(w http.ResponseWriter, r *http.Request) {
		i, err := deviceIndex(r)
		if err != nil {
			replySchedErr(w, err)
			return
		}
		p, err := m.Policy(i)
		if err != nil {
			replySchedErr(w, err)
			return
		}
		reply(w, http.StatusOK, PolicyBody{Device: i, Policy: string(p)})
	})
	mux.HandleFunc("PUT /v1/devices/{index}/policy", func(w http.ResponseWriter, r *http.Request) {
		i, err := deviceIndex(r)
		if err != nil {
			replySchedErr(w, err)
			return
		}
		var body PolicyBody
		if err := decode(r, &body); err != nil {
			replySchedErr(w, fmt.Errorf("set policy: body: %w", err))
			return
		}
		if err := m.SetPolicy(i, body.Policy); err != nil {
			replySchedErr(w, err)
			return
		}
		p, _ := m.Policy(i)
		reply(w, http.StatusOK, PolicyBody{Device: i, Policy: string(p)})
	})
	mux.HandleFunc("PUT /v1/instances/{uuid}/share", func(w http.ResponseWriter, r *http.Request) {
		var body ShareBody
		if err := decode(r, &body); err != nil {
			replySchedErr(w, fmt.Errorf("set share: body: %w", err))
			return
		}
		id := r.PathValue("uuid")
		if err := m.SetShare(id, body.Share); err != nil {
			replySchedErr(w, err)
			return
		}
		in, err := m.Get(id)
		if err != nil {
			replySchedErr(w, err)
			return
		}
		reply(w, http.StatusOK, InstanceStats{InstanceInfo: infoOf(in), Sched: in.Sched()})
	})
}

func deviceIndex(r *http.Request) (int, error) {
	i, err := strconv.Atoi(r.PathValue("index"))
	if err != nil {
		return 0, fmt.Errorf("device index %q: %w", r.PathValue("index"), mdev.ErrNoDevice)
	}
	return i, nil
}

func replySchedErr(w http.ResponseWriter, err error) {
	if errors.Is(err, mdev.ErrNoDevice) {
		reply(w, http.StatusNotFound, errorBody{Error: err.Error()})
		return
	}
	replyErr(w, err)
}
