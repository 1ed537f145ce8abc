package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/vgpud/vgpud/worker"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// SandboxConfig is the configuration file's "sandbox" section: what every
// worker may use beyond the policy vgpud derives from the OpenCL platform
// it finds (docs/sandbox.md, "Platforms"). vgpud -sandbox-diagnose says
// what a platform needs that the derived policy lacks.
type SandboxConfig struct {
	// Read are more files and directories workers may read.
	Read []string `json:"read,omitempty"`
	// ReadExec are programs workers may run.
	ReadExec []string `json:"read_exec,omitempty"`
	// Devices are more device nodes workers may open read-write and
	// drive with ioctl.
	Devices []string `json:"devices,omitempty"`
	// Syscalls are more system calls workers may make, with any
	// arguments.
	Syscalls []string `json:"syscalls,omitempty"`
	// SharedMemory lets workers map shared anonymous memory, which
	// RLIMIT_DATA does not bound (sandbox.Policy.SharedMemory).
	SharedMemory bool `json:"shared_memory,omitempty"`
}

// derive is the workers' policy, derived from the host's platforms
// (logged on log) with c's additions.
func (c SandboxConfig) derive(log *slog.Logger) *sandbox.Policy {
	p := c.add(worker.DeriveSandbox(log))
	return &p
}

// add is p with c's additions.
func (c SandboxConfig) add(p sandbox.Policy) sandbox.Policy {
	p.Read = append(p.Read, c.Read...)
	p.ReadExec = append(p.ReadExec, c.ReadExec...)
	p.Devices = append(p.Devices, c.Devices...)
	p.Syscalls = append(p.Syscalls, c.Syscalls...)
	p.SharedMemory = p.SharedMemory || c.SharedMemory
	return p
}

// diagnoseTimeout bounds a diagnosis: one small kernel, built and run by a
// worker whose every file call takes a round trip to this process.
const diagnoseTimeout = 10 * time.Minute

// diagnoseSandbox is vgpud -sandbox-diagnose: it prints the platforms
// found, the policy derived from them, and what one kernel run in a
// confined worker on device sel was refused. It fails when the kernel did
// not run right.
func diagnoseSandbox(ctx context.Context, cfg Config, sel string, jsonOut bool, out io.Writer) error {
	platforms, perr := sandbox.FindPlatforms(sandbox.Host{})
	pol := cfg.Sandbox.add(sandbox.PolicyFor("", platforms, perr))
	ctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	d, err := worker.Diagnose(ctx, worker.DiagnoseConfig{Policy: pol, Device: sel, Dir: cfg.WorkerDir})
	if jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if e := enc.Encode(struct {
			Platforms []sandbox.Platform `json:"platforms"`
			Policy    sandbox.Policy     `json:"policy"`
			Diagnosis worker.Diagnosis   `json:"diagnosis"`
		}{platforms, pol, d}); e != nil {
			return e
		}
	} else {
		printDiagnosis(out, platforms, perr, pol, d)
	}
	switch {
	case err != nil:
		return err
	case !d.OK():
		return fmt.Errorf("sandbox diagnosis: the kernel did not run in a confined worker (step %s: %s)", d.SelfTest.Step, d.SelfTest.Err)
	}
	return nil
}

func printDiagnosis(out io.Writer, platforms []sandbox.Platform, perr error, pol sandbox.Policy, d worker.Diagnosis) {
	w := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	if perr != nil {
		w("platforms: %v", perr)
	}
	for _, p := range platforms {
		w("platform %s: %s -> %s (%d libraries)", p.Vendor, orDash(p.ICD), p.Library, len(p.Libraries))
		if len(p.Dirs) > 0 {
			w("  library directories: %s", strings.Join(p.Dirs, " "))
		}
		if len(p.Devices) > 0 {
			w("  devices: %s", strings.Join(p.Devices, " "))
		}
		if len(p.Read) > 0 {
			w("  driver files: %s", strings.Join(p.Read, " "))
		}
		if len(p.Missing) > 0 {
			w("  MISSING libraries: %s", strings.Join(p.Missing, " "))
		}
	}
	w("policy: %d read, %d read+exec, %d write, %d devices, %d extra syscalls", len(pol.Read), len(pol.ReadExec),
		len(pol.Write), len(pol.Devices), len(pol.Syscalls))
	st := d.SelfTest
	switch {
	case d.OK():
		built := "from OpenCL C"
		if st.IL {
			built = "from OpenCL C and from SPIR-V"
		}
		w("kernel: ran right on %s in a confined worker, built %s", st.Device, built)
	case st.Step == "":
		w("kernel: the worker printed no result (%s)", d.Exit)
	default:
		w("kernel: FAILED at step %s on %s: %s", st.Step, orDash(st.Device), st.Err)
		if st.BuildLog != "" {
			w("  build log: %s", st.BuildLog)
		}
	}
	if len(d.Denials) == 0 {
		w("denials: none")
	} else {
		w("denials (%d kinds), to allow in the configuration's \"sandbox\" section if the platform needs them:", len(d.Denials))
		ds := slices.Clone(d.Denials)
		for _, x := range ds {
			w("  %s", x)
		}
	}
	if !d.OK() && d.Stderr != "" {
		w("worker stderr (untrusted):\n%s", d.Stderr)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var errDiagnoseArgs = errors.New("-sandbox-diagnose takes at most one -device")
