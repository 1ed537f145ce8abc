#!/usr/bin/env bash
# gpu-check.sh: check vgpud on a machine with a real GPU, with binaries
# built elsewhere (issue 29; docs/gpu-check.md).
#
#   scripts/gpu-check.sh build [DIR]   on a development machine (Debian 12,
#                                      Go, PoCL): build the bundle in DIR
#                                      (default build/gpu-check)
#   scripts/gpu-check.sh run [DIR]     on the GPU machine, from the
#                                      repository's root: run the checks
#                                      with the bundle, print one report
#
# The bundle holds vgpud and vgpuctl, the test binaries of package gpu,
# worker/sandbox and mdev, bench/isolation, and Debian's ICD loader
# (libOpenCL.so.1 of ocl-icd), which GPU images often lack. Nothing is
# built on the GPU machine: it needs only the vendor's OpenCL driver (its
# vendor file in /etc/OpenCL/vendors, or its libnvidia-opencl.so.1 where
# the dynamic loader finds it: then the run writes a vendor file of its
# own and points OCL_ICD_VENDORS at it).
#
# run's steps, each bounded by a timeout, each run whatever the ones
# before did:
#   platform   the OpenCL devices vgpud sees (vgpud -list-devices)
#   gpu        package gpu's tests on the first device
#   diagnose   vgpud -sandbox-diagnose: the policy derived from the
#              platform, one kernel in a confined worker, every denial
#   sandbox    worker/sandbox's confinement tests with the derived policy
#   suite      the vGPU suite through the QEMU-less harness, sandboxed
#              workers (mdev TestSuiteOverHarness)
#   attacks    the isolation attacks beside a good guest (mdev
#              TestIsolationAttacks)
#   stream     package gpu's BenchmarkStream: a 64 MiB copy between
#              scattered host memory and the device, directly, staged, and
#              streamed through pinned pieces of each geometry (issue 42)
#   copypath   package aggregator's BenchmarkStreamedCopy: an 8 MiB copy of
#              scattered guest RAM through the aggregator on the device,
#              the cost around the stream (not yet run on a GPU), with a
#              CPU profile in copypath.pprof (self-contained: read it
#              where Go is, go tool pprof -top copypath.pprof)
#   bench      bench/isolation: per-command latency and the matmul job,
#              through vgpud vs in-process vs directly on the platform
#   contexts   device contexts on the GPU (mdev TestContextsInTheWorker: a
#              context there is a second OpenCL context in the worker;
#              TestContextsIsolateProcesses and TestContextHangEndsAlone,
#              which need executors, skip there), and issue 42's poll-then-block
#              mechanism tests (TestPolledDoorbellsNeedNoWakeups,
#              TestIdleWorkerSleeps, TestPollingWorkerNeedsNoDoorbells,
#              TestFirstTurnOnAFreeDeviceNeedsNoRequest)
#   datapath   bench/isolation's hop-by-hop ladder and copy-bandwidth
#              tables (issue 42): 4 KiB to 256 MiB against the platform's
#              own clEnqueueWrite/ReadBuffer
#   icd        bench/apps -sections small on the host: clsmall's many
#              small calls through the vgpud ICD and tests/icdhost
#              against the same program on the platform directly
#              (issue 43)
# The report is printed last and written to $GPU_CHECK_OUT (default
# DIR/report) with each step's full log beside it. The whole run took
# under 8 minutes on an H100 before contexts and datapath were added (GPU_CHECK_STEP_TIMEOUT bounds each step,
# default 150 s; GPU_CHECK_STEPS picks steps, e.g. "platform diagnose").
set -euo pipefail

usage() {
	echo "usage: $0 build|run [DIR]" >&2
	exit 2
}
[[ $# -ge 1 ]] || usage
mode=$1
dir=${2:-build/gpu-check}

build() {
	export PATH=$PATH:/usr/local/go/bin
	go() { command "${GO:-go}" "$@"; }
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp/bin" "$dir.tmp/lib"
	go build -ldflags=-s -o "$dir.tmp/bin/vgpud" ./cmd/vgpud
	go build -ldflags=-s -o "$dir.tmp/bin/vgpuctl" ./cmd/vgpuctl
	go build -ldflags=-s -o "$dir.tmp/bin/isolation" ./bench/isolation
	go test -c -ldflags=-s -o "$dir.tmp/bin/gpu.test" ./gpu
	go test -c -ldflags=-s -o "$dir.tmp/bin/sandbox.test" ./worker/sandbox
	go test -c -ldflags=-s -o "$dir.tmp/bin/mdev.test" ./mdev
	go test -c -ldflags=-s -o "$dir.tmp/bin/aggregator.test" ./aggregator
	# The ICD step's programs: bench/apps runs them prebuilt (-prebuilt).
	go build -ldflags=-s -o "$dir.tmp/bin/apps" ./bench/apps
	go build -ldflags=-s -o "$dir.tmp/bin/icdhost" ./tests/icdhost
	gcc -std=c11 -O2 -Wall -Werror -o "$dir.tmp/bin/clsmall" bench/apps/clsmall/clsmall.c -lOpenCL
	gcc -std=c11 -O2 -Wall -Werror -o "$dir.tmp/bin/cljob" bench/apps/cljob/cljob.c -lOpenCL -lm
	"${MAKE:-make}" --no-print-directory icd GO="${GO:-go}" >/dev/null
	cp build/icd/libvgpud-icd.so "$dir.tmp/lib/"
	local icd
	icd=$(ldconfig -p | awk '/libOpenCL\.so\.1 .*x86-64/ {print $NF; exit}')
	[[ -n $icd ]] || {
		echo "gpu-check: no libOpenCL.so.1 here (apt-get install ocl-icd-libopencl1)" >&2
		exit 1
	}
	cp -L "$icd" "$dir.tmp/lib/libOpenCL.so.1"
	git rev-parse HEAD >"$dir.tmp/commit" 2>/dev/null || echo unknown >"$dir.tmp/commit"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	# The device tool carries at most 64 MiB: the bundle goes as a
	# tarball (tar xzf it in the repository's build/ there).
	tar czf "$dir.tgz" -C "$(dirname "$dir")" "$(basename "$dir")"
	du -sh "$dir" "$dir.tgz"
}

run() {
	dir=$(realpath "$dir")
	[[ -x $dir/bin/vgpud ]] || {
		echo "gpu-check: no bundle in $dir: run '$0 build' on a development machine and carry it" >&2
		exit 1
	}
	local repo out timeout steps
	repo=$(pwd)
	out=${GPU_CHECK_OUT:-$dir/report}
	timeout=${GPU_CHECK_STEP_TIMEOUT:-150}
	steps=${GPU_CHECK_STEPS:-platform gpu diagnose sandbox suite attacks contexts images stream copypath bench datapath icd}
	mkdir -p "$out"
	export LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	local report=$out/report.txt
	: >"$report"
	say() { echo "$*" | tee -a "$report"; }
	say "gpu-check: bundle $(cat "$dir/commit"), host $(uname -r), $(date -u +%FT%TZ)"
	say "environment: $(env | grep -E '^(OCL_|OPENCL_|POCL_|RUSTICL_|CUDA_VISIBLE)' | tr '\n' ' ')"
	# The GPU's own platform only: GPU_CHECK_ICD names its library (by
	# default NVIDIA's, where the dynamic loader or the usual directory
	# has it), which the ICD loader then loads alone; images often list
	# PoCL too, and vgpud would pick the first device.
	local lib=${GPU_CHECK_ICD:-}
	if [[ -z $lib ]]; then
		lib=$(ldconfig -p | awk '/libnvidia-opencl\.so\.1 .*x86-64/ {print $NF; exit}')
		[[ -n $lib ]] || lib=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 2>/dev/null | head -n1 || true)
	fi
	if [[ -n $lib ]]; then
		# A vendor directory of our own: Debian 12's ocl-icd (the
		# bundle's loader) reads OCL_ICD_VENDORS, not OCL_ICD_FILENAMES.
		# In the bundle, not under /tmp: the vendor directory is in
		# every worker's view, and the sandbox tests check that /tmp
		# is not.
		local vendors=$dir/vendors
		rm -rf "$vendors"
		mkdir -p "$vendors"
		chmod 755 "$vendors"
		echo "$lib" >"$vendors/gpu.icd"
		export OCL_ICD_VENDORS=$vendors
		unset OCL_ICD_FILENAMES OPENCL_VENDOR_PATH
		say "platform library: $lib (OCL_ICD_VENDORS=$vendors)"
	fi
	# The device every step uses: GPU_CHECK_DEVICE (a gpu.Open selector),
	# else the first.
	export VGPUD_TEST_DEVICE=${GPU_CHECK_DEVICE:-}
	if command -v nvidia-smi >/dev/null; then
		say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n4 | tr '\n' ';')"
	fi
	say "vendor files: $(ls "${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}" 2>&1 | tr '\n' ' ')$(cat "${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}"/*.icd 2>/dev/null | tr '\n' ' ')"
	say "device nodes: $(ls -l /dev/nvidia* /dev/dri/* /dev/kfd 2>/dev/null | awk '{print $1, $3":"$4, $NF}' | tr '\n' ';')"
	say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH; ld.so.conf.d: $(cat /etc/ld.so.conf.d/*.conf 2>/dev/null | grep -v '^#' | tr '\n' ' ')"
	declare -A result
	# step NAME DIR CMD...: run CMD in DIR (relative to the repository),
	# bounded, its output in $out/NAME.log.
	step() {
		local name=$1 wd=$2
		shift 2
		[[ " $steps " == *" $name "* ]] || return 0
		local t0 rc
		t0=$(date +%s)
		set +e
		(cd "$repo/$wd" && timeout -k 10 "$timeout" "$@") >"$out/$name.log" 2>&1
		rc=$?
		set -e
		local took=$(($(date +%s) - t0))
		case $rc in
		0) result[$name]="pass (${took}s)" ;;
		124 | 137) result[$name]="TIMEOUT after ${took}s" ;;
		*) result[$name]="FAIL rc=$rc (${took}s)" ;;
		esac
		say ""
		say "== $name: ${result[$name]}"
		# What matters of each log: failures and the tables.
		case $name in
		platform | diagnose | stream | copypath | bench | datapath | icd) tail -n 60 "$out/$name.log" | tee -a "$report" ;;
		*) grep -E -- '^(--- FAIL|FAIL|ok|PASS|panic)|^\s+\S+_test\.go:[0-9]+:' "$out/$name.log" | head -n 40 | tee -a "$report" || true ;;
		esac
	}
	step platform . "$dir/bin/vgpud" -list-devices
	if [[ " $steps " == *" platform "* && ${result[platform]} != pass* ]]; then
		say "-- the ICD loader's account (OCL_ICD_DEBUG=15):"
		OCL_ICD_DEBUG=15 "$dir/bin/vgpud" -list-devices 2>&1 | tail -n 25 | tee -a "$report" || true
	fi
	step gpu gpu "$dir/bin/gpu.test" -test.count=1 -test.timeout=140s
	step diagnose . "$dir/bin/vgpud" -sandbox-diagnose -device "$VGPUD_TEST_DEVICE"
	step sandbox worker/sandbox "$dir/bin/sandbox.test" -test.count=1 -test.timeout=140s
	step suite mdev "$dir/bin/mdev.test" -test.count=1 -test.v -test.run '^TestSuiteOverHarness$' -test.timeout=140s
	step attacks mdev "$dir/bin/mdev.test" -test.count=1 -test.v -test.run '^TestIsolationAttacks$' -test.timeout=140s
	step contexts mdev "$dir/bin/mdev.test" -test.count=1 -test.v -test.run '^(TestContextsIsolateProcesses|TestContextHangEndsAlone|TestContextsInTheWorker|TestPolledDoorbellsNeedNoWakeups|TestIdleWorkerSleeps|TestPollingWorkerNeedsNoDoorbells|TestFirstTurnOnAFreeDeviceNeedsNoRequest)$' -test.timeout=140s
	step images aggregator "$dir/bin/aggregator.test" -test.count=1 -test.v -test.run '^(TestImageLaunch|TestImageBufferLaunch|TestILBuild)$' -test.timeout=140s
	step stream gpu "$dir/bin/gpu.test" -test.run '^$' -test.bench '^BenchmarkStream$' -test.benchtime 8x
	step copypath aggregator "$dir/bin/aggregator.test" -test.run '^$' -test.bench '^BenchmarkStreamedCopy$' -test.benchtime 200x \
		-test.cpuprofile "$out/copypath.pprof"
	step bench . "$dir/bin/isolation" -ops 500 -runs 3
	step datapath . "$dir/bin/isolation" -sections ladder,bandwidth -ops 500
	step icd . "$dir/bin/apps" -sections small -small-guest=false -prebuilt "$dir/bin" -icd "$dir/lib/libvgpud-icd.so" \
		-direct "${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}" -device "$VGPUD_TEST_DEVICE" \
		-small-launches 3000 -small-reads 3000 -small-steps 1000 -small-runs 5
	say ""
	say "== summary"
	for s in $steps; do
		say "$(printf '%-9s %s' "$s" "${result[$s]:-not run}")"
	done
}

case $mode in
build) build ;;
run) run ;;
*) usage ;;
esac
