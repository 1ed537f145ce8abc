package syncjob

// Console line prefixes: BeginPrefix + mode announces a mode, LinePrefix +
// JSON of Result reports it.
const (
	LinePrefix = "VGPU-SYNC "
	// UIOPrefix starts the line vgpu-sync prints at the end with
	// -blocker uio: "interrupts=N rechecks=M", the blocked waits an
	// interrupt ended and those its 50 ms re-check ended (none came).
	UIOPrefix   = "VGPU-SYNC-UIO "
	BeginPrefix = "VGPU-SYNC-BEGIN "
)

// Result is one mode's measurements, as the guest sees them.
type Result struct {
	Mode      string `json:"mode"`
	Steps     int    `json:"steps"`
	RuntimeNs int64  `json:"runtime_ns"`
	LaunchNs  int64  `json:"launch_ns"`
	WaitNs    int64  `json:"wait_ns"`
	Polled    uint64 `json:"polled"`
	Blocked   uint64 `json:"blocked"`
	Threshold int64  `json:"threshold_ns"`
	HintSlice int64  `json:"hint_slice_ns"`
	HintWait  uint32 `json:"hint_wait_ppm"`
	Checksum  uint32 `json:"checksum"`
}
