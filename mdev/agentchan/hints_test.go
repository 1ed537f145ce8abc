package agentchan

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestIsVCPU(t *testing.T) {
	for _, tc := range []struct {
		comm string
		want bool
	}{
		{"CPU 0/TCG", true}, {"CPU 12/KVM", true}, {"CPU 0/", false}, {"CPU x/TCG", false},
		{"qemu-system-x86", false}, {"CPU 1", false},
	} {
		if got := isVCPU(tc.comm); got != tc.want {
			t.Errorf("isVCPU(%q) = %v, want %v", tc.comm, got, tc.want)
		}
	}
}

func TestSchedField(t *testing.T) {
	b := []byte("cat (1, #threads: 1)\n---\nnr_switches                                  :                   12\nnr_involuntary_switches                      :                    5\n")
	if got, ok := schedField(b, "nr_involuntary_switches"); !ok || got != 5 {
		t.Errorf("schedField(nr_involuntary_switches) = %d, %v, want 5, true", got, ok)
	}
	if _, ok := schedField(b, "missing"); ok {
		t.Errorf("schedField(missing) found something")
	}
}

func TestEstimate(t *testing.T) {
	prev := map[int]vcpuSample{1: {run: 1000, wait: 0, slices: 10, invol: 1}, 2: {run: 5, wait: 5, slices: 1}}
	cur := map[int]vcpuSample{
		1: {run: 1000 + 3_000_000, wait: 3_000_000, slices: 10 + 2, invol: 1 + 1}, // two slices of 1.5 ms, one preempted
		2: {run: 5 + 1_000_000, wait: 5, slices: 1 + 2, invol: 0},                 // two slices of 0.5 ms, never waited
		3: {run: 9e9, slices: 9},                                                  // new thread: no delta
	}
	h, ok, err := estimate(prev, cur, 100*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("estimate = %v, %v", ok, err)
	}
	// 4 ms of run time, one preemption: the host takes the CPU away
	// every 4 ms.
	if h.MeanSliceNs != 4_000_000 || h.WaitPPM != 428571 || h.PreemptPPM != 250_000 || h.VCPUs != 3 || h.PeriodNs != 1e8 {
		t.Errorf("estimate = %+v, want slice 4ms, wait 428571 ppm, preempt 250000 ppm, 3 vcpus", h)
	}
	if _, ok, _ := estimate(prev, prev, time.Second); ok {
		t.Errorf("estimate with no progress reported hints")
	}
}

// TestProcHinter names one of this process's threads like a QEMU vCPU,
// runs it, and reads its hints.
func TestProcHinter(t *testing.T) {
	ready, stop, stopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		runtime.LockOSThread() // never unlocked: the renamed thread exits with the goroutine
		if err := unix.Prctl(unix.PR_SET_NAME, uintptrOf("CPU 0/TEST"), 0, 0, 0); err != nil {
			t.Errorf("prctl: %v", err)
		}
		close(ready)
		for x := 0; ; x++ {
			select {
			case <-stop:
				return
			default:
			}
			if x%1000 == 0 {
				runtime.Gosched()
			}
		}
	}()
	<-ready
	defer func() { close(stop); <-stopped }()
	tids, err := VCPUThreads(os.Getpid(), "")
	if err != nil || len(tids) == 0 {
		t.Fatalf("VCPUThreads(self) = %v, %v, want our renamed thread", tids, err)
	}
	h, err := NewProcHinter(os.Getpid(), "")
	if err != nil {
		t.Fatal(err)
	}
	for {
		hint, ok, err := h.Hints()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if hint.VCPUs == 0 || hint.MeanSliceNs == 0 || hint.WaitPPM > 1_000_000 {
				t.Errorf("Hints() = %+v", hint)
			}
			return
		}
		runtime.Gosched()
	}
}
