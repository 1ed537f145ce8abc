package worker

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/vgpud/vgpud/worker/child"
)

// TestWorkerEnv: the OpenCL platforms' variables reach a worker (PoCL's,
// the ICD loader's, and Mesa rusticl's on llvmpipe, which make
// test-platforms selects by them), the worker's own directory replaces
// every cache and home the caller named, and nothing else of vgpud's
// environment passes.
func TestWorkerEnv(t *testing.T) {
	// The OpenCL platforms' variables pass as they are.
	platforms := []string{
		"OCL_ICD_VENDORS=/etc/OpenCL/vendors/rusticl.icd",
		"OCL_ICD_FILENAMES=libRusticlOpenCL.so.1",
		"POCL_DEVICES=pthread basic",
		"RUSTICL_ENABLE=llvmpipe",
		"RUSTICL_FEATURES=fp64",
		"LP_NUM_THREADS=2",
		"GALLIUM_DRIVER=llvmpipe",
		"MESA_DEBUG=silent",
		"LD_LIBRARY_PATH=/opt/cl/lib",
	}
	from := append(slices.Clone(platforms),
		// Caches and homes a worker must not share with another domain.
		"POCL_CACHE_DIR=/var/cache/shared",
		"MESA_SHADER_CACHE_DIR=/var/cache/shared",
		"MESA_GLSL_CACHE_DIR=/var/cache/shared",
		"XDG_CACHE_HOME=/var/cache/shared",
		"HOME=/root",
		"TMPDIR=/tmp",
		"PATH=/usr/local/bin:/usr/bin",
		// Nothing else of vgpud's.
		"VGPUD_SECRET=1",
		"SSH_AUTH_SOCK=/run/agent",
		"LPX=1",
		"MESAX=1",
	)
	got := workerEnv(from, "/run/vgpud/w1", slog.LevelInfo)
	want := append(slices.Clone(platforms),
		"POCL_CACHE_DIR=/run/vgpud/w1",
		"TMPDIR=/run/vgpud/w1",
		"HOME=/run/vgpud/w1",
		"PATH=/usr/bin:/bin",
		child.EnvWorker+"=1",
		child.EnvLog+"=INFO",
		child.EnvCache+"=/run/vgpud/w1",
	)
	for _, kv := range want {
		if !slices.Contains(got, kv) {
			t.Errorf("worker env lacks %q: %q", kv, got)
		}
	}
	for _, kv := range got {
		if !slices.Contains(want, kv) {
			t.Errorf("worker env has %q, which it should not", kv)
		}
	}
}
