#!/usr/bin/env bash
# test-platforms.sh: make test-platforms (docs/platforms.md, issue 29). Runs
# the device-level tests on three independent OpenCL implementations:
#
#   pocl3    PoCL 3.1, the host's (Debian 12), run directly
#   pocl6    PoCL 6.0 (trixie), in the VMM root (scripts/vmm-root.sh)
#   rusticl  Mesa's rusticl on llvmpipe (trixie), in the VMM root
#
# and for each the packages: gpu (all its tests), an executor's image and
# SPIR-V tests (gpu/remote), the aggregator's SPIR-V and image launches
# through the ring, worker/sandbox (all: the confinement tests), the
# sandbox diagnosis's self-test (worker: a SPIR-V build in a confined
# worker, where PoCL 6 runs llvm-spirv), the ICD's SPIR-V program
# (tests/icdhost, with the ICD and testdata/il.c built here), mdev's
# isolation attacks and the vGPU suite through the QEMU-less harness, and
# bench/reuse's mechanism test. A platform is
# chosen by its environment: OCL_ICD_VENDORS names its one .icd file (the
# ICD loader then loads no other), and RUSTICL_ENABLE=llvmpipe turns on
# rusticl's CPU device; worker.Pool passes both on to the workers.
#
# The test binaries are built once on the host (go test -c, into
# build/platforms/) and run in the root by scripts/vmm-run.sh with the
# repository bound, each in its package's directory, as root; the root is
# built first if missing or stale (cached, scripts/vmm-root.sh). Each
# run's verbose output is build/platforms/PLATFORM-PACKAGE.log. One table
# ends the run: platform x package -> pass/FAIL and the tests run, with
# every skipped test and its reason below it (a skip does not fail this
# target, it is shown); the script fails if any run failed.
#
# Needs root (the VMM root's build and vmm-run.sh). Idempotent: a second
# run rebuilds only changed test binaries (go's cache) and reruns the tests.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd -P)
out=build/platforms
root=build/vmm-root
GO=${GO:-go}

[[ $(id -u) -eq 0 ]] || {
	echo "test-platforms: needs root (the VMM root and its namespaces)" >&2
	exit 1
}

start=$SECONDS
scripts/vmm-root.sh "$root"
mkdir -p "$out"

# name package run-pattern ("" runs every test)
suites=(
	"gpu ./gpu"
	"remote ./gpu/remote ^TestServedPoCL(Images|IL)$"
	"aggregator ./aggregator ^(TestILBuild|TestImageLaunch|TestImageBufferLaunch)$"
	"sandbox ./worker/sandbox"
	"worker ./worker ^TestDiagnose$"
	"icd ./tests/icdhost ^TestICDSPIRV$"
	"mdev ./mdev ^(TestIsolationAttacks|TestWorkerKilledMidLaunch|TestUnsealedGuestRAMRefused|TestCompilerCachePerDomain|TestSuiteOverHarness|TestHostileGuestDoesNotDisturbNeighbour|TestKernelCannotReachGuestRAM)$"
	"reuse ./bench/reuse ^TestDefaultConfigServesRepeats$"
)
for s in "${suites[@]}"; do
	read -r name pkg _ <<<"$s"
	$GO test -c -o "$out/$name.test" "$pkg"
done

# The ICD and its SPIR-V test program, built here: the root has no C
# compiler (tests/icdhost's TestICDSPIRV takes them from the environment).
make -s icd
mkdir -p "$out/icd"
cp build/icd/libvgpud-icd.so "$out/icd/"
echo "$repo/$out/icd/libvgpud-icd.so" >"$out/icd/vgpud.icd"
gcc -std=c11 -Wall -Werror -Iguestagent/icd/testdata -o "$out/il" guestagent/icd/testdata/il.c -lOpenCL
export VGPUD_TEST_ICD_DIR=$repo/$out/icd VGPUD_TEST_IL_PROGRAM=$repo/$out/il

# platform where expected-platform-name env...
platforms=(
	"pocl3 host Portable_Computing_Language OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd"
	"pocl6 root Portable_Computing_Language OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd"
	"rusticl root rusticl OCL_ICD_VENDORS=/etc/OpenCL/vendors/rusticl.icd RUSTICL_ENABLE=llvmpipe"
)

# inplace WHERE DIR ENV... -- CMD...: run CMD in DIR (relative to the
# repository) on the host or in the root, with only ENV of the OpenCL
# platform's variables.
inplace() {
	local where=$1 dir=$2
	shift 2
	local -a env=()
	while [[ $1 != -- ]]; do
		env+=("$1")
		shift
	done
	shift
	# The caller's own OpenCL selection must not leak into a platform's run.
	local -a clean=(env -u OCL_ICD_VENDORS -u OCL_ICD_FILENAMES -u RUSTICL_ENABLE -u POCL_DEVICES "${env[@]}")
	if [[ $where == host ]]; then
		(cd "$repo/$dir" && "${clean[@]}" "$@")
	else
		(cd "$repo/$dir" && VMM_RUN_BINDS=$repo "$repo/scripts/vmm-run.sh" "$repo/$root" -- "${clean[@]}" "$@")
	fi
}

declare -A result
failed=0
skips=()
for p in "${platforms[@]}"; do
	read -r plat where want envs <<<"$p"
	read -r -a penv <<<"$envs"
	want=${want//_/ }
	# The run is worth something only on the platform it is named for.
	if ! listing=$(inplace "$where" . "${penv[@]}" -- clinfo -l 2>&1) ||
		! grep -q "^Platform #0: $want\$" <<<"$listing" || grep -q "^Platform #1" <<<"$listing" ||
		! grep -q "Device #0" <<<"$listing"; then
		echo "test-platforms: $plat: want exactly the platform \"$want\" with a device, clinfo -l says:" >&2
		echo "$listing" >&2
		for s in "${suites[@]}"; do
			read -r name _ <<<"$s"
			result[$plat.$name]="FAIL (platform)"
		done
		failed=1
		continue
	fi
	echo "test-platforms: $plat: $(grep -m1 'Device #0' <<<"$listing" | sed 's/.*Device #0: //')" >&2
	for s in "${suites[@]}"; do
		read -r name pkg pattern <<<"$s"
		log=$out/$plat-$name.log
		args=(-test.v -test.count=1 -test.timeout=10m)
		[[ -n $pattern ]] && args+=("-test.run=$pattern")
		t0=$SECONDS
		rc=0
		inplace "$where" "${pkg#./}" "${penv[@]}" -- "$repo/$out/$name.test" "${args[@]}" >"$log" 2>&1 || rc=$?
		# Top-level tests only (subtests are indented).
		npass=$(grep -c '^--- PASS' "$log" || true)
		nfail=$(grep -c '^--- FAIL' "$log" || true)
		nskip=$(grep -c '^--- SKIP' "$log" || true)
		while IFS= read -r line; do
			skips+=("$plat $name: $line")
		done < <(grep -B1 '^--- SKIP' "$log" | grep -v '^--$' | paste - - | sed 's/^ *\(.*\)\t--- SKIP: \([^ ]*\).*/\2: \1/')
		cell="pass $npass"
		if [[ $rc -ne 0 || $nfail -ne 0 ]]; then
			cell="FAIL $nfail/$((npass + nfail + nskip))"
			[[ $nfail -eq 0 ]] && cell="FAIL rc=$rc"
			failed=1
			echo "test-platforms: $plat $name failed: $log" >&2
			grep '^--- FAIL' "$log" >&2 || tail -n 5 "$log" >&2
		fi
		[[ $nskip -ne 0 ]] && cell+=" skip $nskip"
		result[$plat.$name]="$cell ($((SECONDS - t0))s)"
	done
done

printf '\n%-8s' platform
for s in "${suites[@]}"; do
	read -r name _ <<<"$s"
	printf ' | %-20s' "$name"
done
printf '\n'
for p in "${platforms[@]}"; do
	read -r plat _ <<<"$p"
	printf '%-8s' "$plat"
	for s in "${suites[@]}"; do
		read -r name _ <<<"$s"
		printf ' | %-20s' "${result[$plat.$name]}"
	done
	printf '\n'
done
for s in "${skips[@]}"; do
	echo "skipped: $s"
done
echo "test-platforms: $((SECONDS - start)) s in all; logs in $out/"
exit "$failed"
