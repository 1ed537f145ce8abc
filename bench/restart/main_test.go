package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestTookRE(t *testing.T) {
	line := `time=2026-11-23T20:40:39.986Z level=INFO msg="reattached the VM's vGPU after a restart" instance=1f82 slot=16 took=892.054123ms programs=1 agent_error=""`
	m := tookRE.FindStringSubmatch(line)
	if m == nil || m[1] != "892.054123ms" {
		t.Fatalf("tookRE on %q = %q", line, m)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < 892*time.Millisecond {
		t.Errorf("ParseDuration(%q) = %v, %v", m[1], d, err)
	}
}

func TestPrintTable(t *testing.T) {
	var out bytes.Buffer
	printTable(t.Context(), &out, "vfio-user", []sample{
		{ready: time.Second, reattach: time.Second, outage: 3 * time.Second, baseline: 12 * time.Second},
		{ready: time.Second, reattach: time.Second, outage: 5 * time.Second, baseline: 10 * time.Second},
	})
	for _, want := range []string{"0.364x", "4000 ms", "11000 ms", "transport vfio-user"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestLongest(t *testing.T) {
	d, err := longest("ITERATE step 40/1000000000 device=pthread-x cus=2 longest=48211us")
	if err != nil || d != 48211*time.Microsecond {
		t.Errorf("longest = %v, %v", d, err)
	}
	if _, err := longest("ITERATE step 40/10 device=x cus=2"); err == nil {
		t.Error("a line without longest= parsed")
	}
}
