package control

import (
	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
)

// InstanceInfo is an instance as the API shows it.
type InstanceInfo struct {
	UUID string `json:"uuid"`
	// Name and Labels are the operator's (vgpuctl create -name, -label).
	Name        string            `json:"name,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Profile     mdev.Profile      `json:"profile"`
	Device      int               `json:"device"`
	Socket      string            `json:"socket,omitempty"`
	Attached    bool              `json:"attached"`
	RingEnabled bool              `json:"ring_enabled"`
	MemUsed     uint64            `json:"mem_used"`
	Error       string            `json:"error,omitempty"` // latched device error
	Stats       Stats             `json:"stats"`
	Reuse       *ReuseInfo        `json:"reuse,omitempty"` // result reuse (reuse.go)
	Limits      mdev.Limits       `json:"limits"`
	// ProgramBytes is the bytes of programs the instance holds (against
	// Limits.ProgramBytes).
	ProgramBytes uint64 `json:"program_bytes"`
	// Lost is set while the instance's device context is gone (its worker
	// ended); the guest's next device reset brings it back.
	Lost bool `json:"lost,omitempty"`
	// WorkerPID is the process serving the instance's trust domain (0 in
	// process or while lost).
	WorkerPID int `json:"worker_pid,omitempty"`
	// Features are what the instance did over the feature window, as the
	// interference placement sees it (docs/placement.md "Features").
	Features interference.Features `json:"features"`
	// Contexts are the instance's device contexts (ABI 1.5): how many the
	// guest may make and how many it has now (docs/isolation.md "Device
	// contexts").
	Contexts ContextsInfo `json:"contexts"`
}

// ContextsInfo counts an instance's device contexts.
type ContextsInfo struct {
	Max  uint32             `json:"max"`
	Live uint32             `json:"live"`
	List []mdev.ContextInfo `json:"list,omitempty"`
}

// Stats are an instance's counters.
type Stats struct {
	Commands     uint64            `json:"commands"`
	Errors       uint64            `json:"errors"`
	Doorbells    uint64            `json:"doorbells"`
	Kicks        mdev.KickStats    `json:"kicks"`
	Launches     uint64            `json:"launches"`
	KernelNanos  uint64            `json:"kernel_ns"`
	BytesToDev   uint64            `json:"bytes_to_device"`
	BytesFromDev uint64            `json:"bytes_from_device"`
	ByStatus     map[string]uint64 `json:"by_status,omitempty"`
}

func infoOf(in *mdev.Instance) InstanceInfo {
	s := in.Stats()
	st := Stats{
		Commands:     s.Commands.Load(),
		Errors:       s.Errors.Load(),
		Doorbells:    s.Doorbells.Load(),
		Kicks:        in.Kicks(),
		Launches:     s.Launches.Load(),
		KernelNanos:  s.KernelNanos.Load(),
		BytesToDev:   s.BytesToDev.Load(),
		BytesFromDev: s.BytesFromDev.Load(),
	}
	for c := abi.Status(0); int(c) < abi.NumStatus; c++ {
		if n := s.ByStatus(c); n > 0 {
			if st.ByStatus == nil {
				st.ByStatus = make(map[string]uint64)
			}
			st.ByStatus[c.String()] = n
		}
	}
	info := InstanceInfo{
		UUID:        in.UUID(),
		Name:        in.Name(),
		Labels:      in.Labels(),
		Profile:     in.Profile(),
		Device:      in.Device(),
		Socket:      in.Socket(),
		Attached:    in.Attached(),
		RingEnabled: in.RingEnabled(),
		MemUsed:     in.MemUsed(),
		Stats:       st,
		Reuse:       reuseInfoOf(in),
		Limits:      in.Limits(),
		Lost:        in.Lost(),
		WorkerPID:   in.WorkerPID(),
		Features:    in.Features(),
		Contexts:    ContextsInfo{Max: in.MaxContexts(), Live: in.LiveContexts(), List: in.ContextList()},
	}
	info.ProgramBytes = in.ProgramBytes()
	if e, _ := in.Error(); e != abi.StatusOK {
		info.Error = e.String()
	}
	return info
}
