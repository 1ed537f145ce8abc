package worker

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCPU is a worker's CPU clock a test drives: each read returns the
// next value of a script, then the last one for ever.
type fakeCPU struct {
	mu     sync.Mutex
	script []time.Duration
	reads  int
	err    error
}

func (f *fakeCPU) read(int) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, f.err
	}
	i := min(f.reads, len(f.script)-1)
	f.reads++
	return f.script[i], nil
}

func (f *fakeCPU) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// TestBuildWatch: a build's budget counts the worker's CPU time. A build
// that got less CPU than its budget (a loaded host) is looked at again,
// not ended; one that spent its budget of CPU is ended; one that spends
// no CPU at all (it blocks) is ended at buildWallFactor times the budget;
// without a CPU clock the budget is wall-clock time. The wall-clock bound
// is an hour where a case must not reach it, whatever the host's load.
func TestBuildWatch(t *testing.T) {
	const budget = 20 * time.Millisecond
	tests := []struct {
		name      string
		cpu       *fakeCPU
		wall      time.Duration
		wantIn    string
		wantReads int // at least this many reads: the watch looked again
	}{
		// Reads: the start, then one per check. Two checks see too little
		// CPU; the third sees the budget spent.
		{"cpu-spent-after-rechecks", &fakeCPU{script: []time.Duration{time.Second, time.Second, time.Second + budget/2, time.Second + budget}}, time.Hour, "of CPU in", 4},
		{"blocked-build", &fakeCPU{script: []time.Duration{0}}, 4 * budget, "of wall-clock time", 2},
		{"no-cpu-clock", &fakeCPU{err: errors.New("no /proc")}, time.Hour, "ran over its budget", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reasons := make(chan string, 2)
			w := startBuildWatch(1, budget, tt.wall, func(r string) { reasons <- r }, tt.cpu.read)
			defer w.stop()
			r := <-reasons
			if !strings.Contains(r, tt.wantIn) {
				t.Errorf("reason %q, want it to contain %q", r, tt.wantIn)
			}
			if n := tt.cpu.count(); n < tt.wantReads {
				t.Errorf("the CPU clock was read %d times, want at least %d", n, tt.wantReads)
			}
		})
	}
}

// TestBuildWatchStop: a build that finished is never ended afterwards.
func TestBuildWatchStop(t *testing.T) {
	over := make(chan string, 1)
	cpu := &fakeCPU{script: []time.Duration{0}}
	w := startBuildWatch(1, time.Hour, time.Hour, func(r string) { over <- r }, cpu.read)
	w.stop()
	w.check() // a timer that had fired already
	select {
	case r := <-over:
		t.Fatalf("a stopped watch ended the build: %s", r)
	default:
	}
}

// TestProcessCPU reads this process's own CPU time: it grows as the
// process computes.
func TestProcessCPU(t *testing.T) {
	pid := os.Getpid()
	before, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	var after time.Duration
	x := uint64(1)
	for after <= before {
		for i := 0; i < 1e6; i++ {
			x = x*6364136223846793005 + 1
		}
		if after, err = processCPU(pid); err != nil {
			t.Fatal(err)
		}
	}
	_ = x
}
