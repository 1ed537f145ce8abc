package mdev

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestKernelTimeoutFormerName: a profile or a limits request that still
// says turn_timeout (an older configuration, state file or client) sets
// the kernel limit; kernel_timeout wins when both are given; what is read
// back says kernel_timeout only, with the slice's default filled in.
func TestKernelTimeoutFormerName(t *testing.T) {
	tests := []struct {
		json        string
		wantKernel  time.Duration
		wantSlice   time.Duration
		wantInvalid bool
	}{
		{`{"turn_timeout": "10m"}`, 10 * time.Minute, DefaultSlice, false},
		{`{"kernel_timeout": "2m", "turn_timeout": "10s"}`, 2 * time.Minute, DefaultSlice, false},
		{`{"slice": "100ms"}`, DefaultKernelTimeout, 100 * time.Millisecond, false},
		{`{}`, DefaultKernelTimeout, DefaultSlice, false},
		{`{"slice": "1ms"}`, 0, 0, true},
		{`{"kernel_timeout": "-1s"}`, 0, 0, true},
	}
	for _, tt := range tests {
		p := Profile{Name: "p", MemBytes: 1 << 20, Share: 1, MaxPerDevice: 1}
		if err := json.Unmarshal([]byte(tt.json), &p); err != nil {
			t.Fatalf("unmarshal %s: %v", tt.json, err)
		}
		if err := p.Validate(); (err != nil) != tt.wantInvalid {
			t.Errorf("Validate(%s) = %v, want error %v", tt.json, err, tt.wantInvalid)
		}
		if tt.wantInvalid {
			continue
		}
		p = p.withDefaults()
		if p.KernelTimeout.D() != tt.wantKernel || p.Slice.D() != tt.wantSlice {
			t.Errorf("profile %s with defaults: kernel %v, slice %v, want %v, %v", tt.json, p.KernelTimeout.D(), p.Slice.D(), tt.wantKernel, tt.wantSlice)
		}
		if l := limitsOf(p); l.KernelTimeout != tt.wantKernel || l.Slice != tt.wantSlice {
			t.Errorf("limitsOf(%s) = kernel %v, slice %v, want %v, %v", tt.json, l.KernelTimeout, l.Slice, tt.wantKernel, tt.wantSlice)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "turn_timeout") || !strings.Contains(string(out), `"kernel_timeout"`) {
			t.Errorf("profile %s written as %s: want kernel_timeout only", tt.json, out)
		}
	}
}

// TestSetLimitsFormerName: PUT limits with the former name sets the
// kernel limit; a slice under MinSlice is refused and changes nothing.
func TestSetLimitsFormerName(t *testing.T) {
	m := newManager(t, []Profile{patientProfile})
	inst := mustCreate(t, m, CreateRequest{Profile: patientProfile.Name})
	var l Limits
	if err := json.Unmarshal([]byte(`{"turn_timeout": "3s", "slice": "50ms"}`), &l); err != nil {
		t.Fatal(err)
	}
	if err := m.SetLimits(inst.UUID(), l); err != nil {
		t.Fatalf("SetLimits(turn_timeout 3s) = %v", err)
	}
	if got := inst.Limits(); got.KernelTimeout.D() != 3*time.Second || got.Slice.D() != 50*time.Millisecond || got.TurnTimeout != 0 {
		t.Errorf("Limits() = %+v, want kernel 3s, slice 50ms", got)
	}
	if err := m.SetLimits(inst.UUID(), Limits{KernelTimeout: Duration(time.Minute), Slice: Duration(time.Millisecond)}); err == nil {
		t.Errorf("SetLimits(slice 1ms) = nil, want an error")
	}
	if got := inst.Limits(); got.KernelTimeout.D() != 3*time.Second {
		t.Errorf("after a refused SetLimits: kernel %v, want 3s kept", got.KernelTimeout.D())
	}
}
