package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

func TestRunModeHarness(t *testing.T) {
	f := drivertest.New(drivertest.Config{}, map[string]drivertest.KernelFunc{
		"namd_step": func(*abi.LaunchDesc, func(uint32) []byte) error { return nil },
	})
	d, err := driver.Open(f, f, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var out bytes.Buffer
	s := driver.NewSync(driver.SyncOptions{Mode: driver.SyncAuto})
	r, err := runMode(d, s, Config{Steps: 5, CPUIters: 10, KernelIters: 1, Items: 4, Timeout: driver.DefaultTimeout}, &out)
	if err != nil {
		t.Fatalf("runMode() = %v", err)
	}
	if r.Steps != 5 || r.Mode != "auto" || r.Polled != 5 || r.Blocked != 0 {
		t.Errorf("runMode() = %+v, want 5 polled auto steps (no blocker)", r)
	}
	if !strings.HasPrefix(out.String(), BeginPrefix+"auto") {
		t.Errorf("output %q, want a begin line", out.String())
	}
}

func TestBadArgs(t *testing.T) {
	for _, args := range [][]string{{"-modes", "spin"}, {"-agent", "pigeon"}} {
		if err := run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}
