package migrate

import (
	"testing"
	"time"

	"github.com/vgpud/vgpud/migrate/qmp"
)

// TestHoldPoint: QEMU's copy is held once what is left would take it at
// most holdAhead at its fastest pace over a window (not a single poll's
// jitter), at holdMin bytes whatever the pace, at its first pass's end,
// and when it stopped before its switchover already; never in setup.
func TestHoldPoint(t *testing.T) {
	active := func(rem int64, syncs int64) qmp.MigrationInfo {
		return qmp.MigrationInfo{Status: qmp.MigrationActive, RAM: qmp.MigrationRAM{Total: 512 << 20, Remaining: rem, DirtySyncCount: syncs}}
	}
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name  string
		polls []qmp.MigrationInfo // one every 10 ms
		want  []bool
	}{
		{"setup", []qmp.MigrationInfo{{Status: qmp.MigrationSetup}}, []bool{false}},
		{"stopped before its switchover", []qmp.MigrationInfo{{Status: qmp.MigrationPreSwitchover}}, []bool{true}},
		{"second pass", []qmp.MigrationInfo{active(400<<20, 2)}, []bool{true}},
		{"little left", []qmp.MigrationInfo{active(holdMin, 1)}, []bool{true}},
		{
			// 10 MiB per 10 ms (1 GiB/s): measured over the 40 ms window,
			// 40 ms ahead is 40 MiB.
			"steady pace",
			[]qmp.MigrationInfo{active(300<<20, 1), active(290<<20, 1), active(280<<20, 1), active(270<<20, 1),
				active(260<<20, 1), active(45<<20, 1), active(40<<20, 1)},
			[]bool{false, false, false, false, false, false, true},
		},
		{
			// A poll's jump (40 MiB in 10 ms: 4 GiB/s, 160 MiB ahead) is
			// averaged over its window (43 MiB in 40 ms: 43 MiB ahead).
			"jitter",
			[]qmp.MigrationInfo{active(300<<20, 1), active(260<<20, 1), active(259<<20, 1), active(258<<20, 1),
				active(257<<20, 1)},
			[]bool{false, false, false, false, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h holdPoint
			for i, p := range tt.polls {
				if got := h.reached(p, t0.Add(time.Duration(i)*10*time.Millisecond)); got != tt.want[i] {
					t.Errorf("poll %d (%d MiB left): held %v, want %v (pace %.0f MiB/s)", i, p.RAM.Remaining>>20, got, tt.want[i], h.rate/(1<<20))
				}
			}
		})
	}
}
