# vgpud: `make demo` runs two VMs sharing one OpenCL device; `make test`
# runs the tests; `make guest-apps` builds the guest's Debian userland
# disk. All install what they need from Debian's packages.

GO      ?= go
GUEST   := build/guest
BIN     := build/bin
GUESTPROGS := vgpu-init vgpu-suite vgpu-mmiobench vgpu-iterate
# A safety net, not a budget: the suite takes about 15 minutes on a quiet
# 2-core machine and must also pass on a loaded one, where it takes longer.
TESTFLAGS ?= -timeout 60m

.PHONY: all deps kernel guest build test test-apps test-short fuzz demo bench bench-interference clean

all: build

deps:
	scripts/install-deps.sh

# The guest kernel and its modules, from Debian's linux-image package.
kernel: deps
	scripts/fetch-kernel.sh $(GUEST)

# Static guest programs and the initramfs that boots them.
guest: kernel
	@mkdir -p $(GUEST)/bin
	for p in $(GUESTPROGS); do \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o $(GUEST)/bin/$$p ./guestagent/cmd/$$p || exit 1; \
	done
	$(GO) run ./guestagent/cmd/vgpu-mkinitramfs -o $(GUEST)/initramfs.cpio \
		-init $(GUEST)/bin/vgpu-init -modules $(GUEST)/modules \
		$(foreach p,$(filter-out vgpu-init,$(GUESTPROGS)),-bin $(p)=$(GUEST)/bin/$(p))

# The Debian userland disk for issue 11's unmodified OpenCL programs
# (docs/guest-image.md, "The userland image"): $(APPS)/rootfs.ext4, which
# qemuvm.Config.Disk attaches read-only, and $(APPS)/initramfs.cpio, the
# guest initramfs plus what mounts that disk, to boot by hand with
# vgpu.run=vgpu-apps vgpu.args=PROGRAM,ARGS. Cached: nothing is downloaded
# or rebuilt again unless the packages, the kernel or the script changed.
APPS      := $(GUEST)/apps
APPSPROGS := vgpu-init vgpu-agent vgpu-mmiobench

.PHONY: guest-apps guest-icd
guest-apps: kernel
	scripts/fetch-userland.sh $(APPS) $(GUEST)
	@mkdir -p $(APPS)/bin
	for p in $(APPSPROGS); do \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o $(APPS)/bin/$$p ./guestagent/cmd/$$p || exit 1; \
	done
	$(GO) run ./guestagent/cmd/vgpu-mkinitramfs -o $(APPS)/base.cpio \
		-init $(APPS)/bin/vgpu-init -modules $(GUEST)/modules \
		$(foreach p,$(filter-out vgpu-init,$(APPSPROGS)),-bin $(p)=$(APPS)/bin/$(p))
	cat $(APPS)/base.cpio $(APPS)/initrd.cpio > $(APPS)/initramfs.cpio.tmp
	mv $(APPS)/initramfs.cpio.tmp $(APPS)/initramfs.cpio

# The userland guest with the vgpud ICD (the README's demo): the apps
# initramfs plus vgpu-icdd, the ICD at /lib/vgpud and the demo's scripts.
guest-icd: guest-apps icd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags=-s -o $(APPS)/bin/vgpu-icdd ./guestagent/cmd/vgpu-icdd
	$(GO) run ./guestagent/cmd/vgpu-mkinitramfs -o $(APPS)/icd-base.cpio \
		-init $(APPS)/bin/vgpu-init -modules $(GUEST)/modules \
		$(foreach p,$(filter-out vgpu-init,$(APPSPROGS)) vgpu-icdd,-bin $(p)=$(APPS)/bin/$(p)) \
		-bin icd-demo=scripts/guest/icd-demo -bin vadd.py=scripts/guest/vadd.py \
		-file /lib/vgpud/libvgpud-icd.so=$(ICD)/libvgpud-icd.so
	cat $(APPS)/icd-base.cpio $(APPS)/initrd.cpio > $(APPS)/icd.cpio.tmp
	mv $(APPS)/icd.cpio.tmp $(APPS)/icd.cpio

build: deps
	$(GO) build -o $(BIN)/vgpud ./cmd/vgpud
	$(GO) build -o $(BIN)/vgpuctl ./cmd/vgpuctl

# The guest OpenCL ICD (docs/icd.md): build/icd/libvgpud-icd.so and
# build/icd/vgpud.icd, the loader's one-line file naming it by absolute
# path (OCL_ICD_VENDORS=build/icd clinfo uses it in place; a guest image
# copies both, the .icd into /etc/OpenCL/vendors). Rebuilt only when a
# source changed; vgpud.icd is rewritten only when the path changed.
ICD        := build/icd
ICD_SRCS   := $(wildcard guestagent/icd/src/*.c)
ICD_HDRS   := $(wildcard guestagent/icd/src/*.h) guestagent/icd/vgpu_abi.h guestagent/icd/vgpu_icdproto.h
ICD_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden

.PHONY: icd
icd: deps $(ICD)/libvgpud-icd.so
	@echo '$(abspath $(ICD))/libvgpud-icd.so' | cmp -s - $(ICD)/vgpud.icd || \
		echo '$(abspath $(ICD))/libvgpud-icd.so' > $(ICD)/vgpud.icd

$(ICD)/libvgpud-icd.so: $(ICD_SRCS) $(ICD_HDRS)
	@mkdir -p $(ICD)
	$(CC) $(ICD_CFLAGS) -Iguestagent/icd -shared -Wl,-z,defs -o $@ $(ICD_SRCS) -lpthread

# guest-apps: TestGuestUserland boots the userland disk (about 20 s to
# build from the mirror on a fresh machine, 2 s when cached); icd: TestGuestICD
# installs the guest ICD in it.
# Every test runs: a skipped test fails `make test` (scripts/testsummary),
# since the targets above install all that the tests need; ALLOW_SKIP=1
# lets a developer without some of it see the rest pass.
#
# make test stays within 20 minutes on 2 cores (the tests package alone
# took 20 of them on the 2026-12-01 host), so three suites have targets
# of their own, and .ci/run runs all four:
# - make test-migrate: live migration, libvirt, and a restart and 20
#   upgrades in place on QEMU 11.1 over vfio-user, in real QEMU guests
#   (MIGRATE_TESTS of tests/, about 9.5 minutes on a quiet 2-core machine);
# - make test-icd: the guest ICD (guestagent/icd's C tests, the host ICD
#   tests of tests/icdhost, and ICD_TESTS of tests/, the ICD and device
#   contexts in real QEMU guests; about 10 minutes);
# - make test-bench: every bench/ program's tiny run (about 4.5 minutes).
MIGRATE_TESTS := ^(TestLibvirt|TestLibvirtVFIOUser|TestLibvirtVFIOUserMigrate|TestMigrateAcrossDeviceModels|TestMigrateRollsBack|TestMigrateVFIOUserICD|TestMigrateVFIOUserInPlace|TestMigrateVFIOUserLiveRollsBack|TestMigrateVFIOUserSourceDies|TestVFIOUserRestartReplugs|TestVFIOUserUpgradesInARowUnderLoad)$$
ICD_TESTS := ^(TestGuestICD|TestGuestContexts)$$
ICD_PKGS := ./guestagent/icd ./tests/icdhost
TEST_PKGS = $(shell $(GO) list ./... | grep -v -e '/bench/' -e '/guestagent/icd$$' -e '/tests/icdhost$$')

# summarize: scripts/testsummary over a JSON file, exiting with the
# status of the go test that wrote it (rc).
summarize = $(GO) run ./scripts/testsummary $(if $(ALLOW_SKIP),,-no-skips) $(1) && exit $$rc

test: deps kernel guest-apps icd vmm-root
	$(GO) vet ./...
	@mkdir -p build
	$(GO) test $(TESTFLAGS) -skip '$(MIGRATE_TESTS)|$(ICD_TESTS)' -json $(TEST_PKGS) > build/test.json; rc=$$?; \
		$(call summarize,build/test.json)

# Live migration (vgpuctl migrate over both transports, libvirt's virsh
# migrate, rollbacks) and vgpud's restart under a vfio-user VM, in real
# QEMU guests: tests/ MIGRATE_TESTS.
.PHONY: test-migrate test-icd test-bench
test-migrate: deps kernel guest-apps icd vmm-root
	@mkdir -p build
	$(GO) test $(TESTFLAGS) -run '$(MIGRATE_TESTS)' -json ./tests/ > build/test-migrate.json; rc=$$?; \
		$(call summarize,build/test-migrate.json)

# The guest ICD: its C tests and the host ICD's, then the ICD and device
# contexts in real QEMU guests.
test-icd: deps kernel guest-apps icd vmm-root
	@mkdir -p build
	$(GO) test $(TESTFLAGS) -json $(ICD_PKGS) > build/test-icd.json; rc=$$?; \
		$(call summarize,build/test-icd.json)
	$(GO) test $(TESTFLAGS) -run '$(ICD_TESTS)' -json ./tests/ > build/test-icd-guests.json; rc=$$?; \
		$(call summarize,build/test-icd-guests.json)

# The benchmark programs, each run tiny (bench/README.md has their tables).
test-bench: deps kernel guest-apps icd vmm-root
	@mkdir -p build
	$(GO) test $(TESTFLAGS) -json ./bench/... > build/test-bench.json; rc=$$?; \
		$(call summarize,build/test-bench.json)

# Every application of issue 11 (pyopencl's tests, clpeak, hashcat, a
# CLBlast tuner) in two guests at once through the ICD: many minutes.
test-apps: deps kernel guest-apps icd
	$(GO) test -tags apps -count=1 -timeout 110m -v -run 'TestGuestApps|TestGuestICD' ./tests/

# In-process tests only (no QEMU boots).
test-short: deps
	$(GO) test -short ./...

# A short run of every fuzz target.
fuzz:
	scripts/fuzz-all.sh 20s

demo: build guest guest-icd vmm-root
	scripts/demo.sh

# Every benchmark table (bench/README.md); each compares against a baseline
# measured in the same run.
bench: build guest guest-apps icd
	$(GO) run ./bench/datapath
	$(GO) run ./bench/sched
	$(GO) run ./bench/reuse
	$(GO) run ./bench/sync
	$(GO) run ./bench/isolation
	$(GO) run ./bench/migrate
	$(GO) run ./bench/restart
	$(GO) run ./bench/apps
	$(GO) run ./bench/placement -eval bench/interference/testdata/pocl-pthread-rerun.json

# The interference placement model's training data: every workload type
# alone and every pair at once on the device (docs/placement.md). Load it
# with vgpuctl place -dataset build/interference.json.
bench-interference: deps
	$(GO) run ./bench/interference -out build/interference.json
	$(GO) run ./bench/placement -dataset build/interference.json

# The modern VMM root (docs/vmm-root.md, issue 28): a Debian trixie root
# with trixie-backports' QEMU 11.1 (vfio-user-pci) and trixie's libvirt,
# built once and cached in build/vmm-root; scripts/vmm-run.sh runs programs
# from it. A prerequisite of test: the real-QEMU tests run on its QEMU 11.1
# over vfio-user beside the host's QEMU 7.2 over mpqemu (a current root
# costs a hash check; a build from nothing about two minutes).
VMMROOT := build/vmm-root

.PHONY: vmm-root
vmm-root:
	scripts/vmm-root.sh $(VMMROOT)

# The device-level tests (gpu, worker/sandbox, mdev's isolation attacks
# and the vGPU suite over the harness, reuse's mechanism test) on three
# OpenCL implementations: the host's PoCL 3.1, and PoCL 6 and Mesa's
# rusticl on llvmpipe in the VMM root, which it builds if needed
# (docs/platforms.md). Needs root. Prints one table; fails if any run did.
.PHONY: test-platforms
test-platforms: deps
	GO=$(GO) scripts/test-platforms.sh

# The bundle scripts/gpu-check.sh runs on a machine with a GPU, where
# nothing is built (docs/gpu-check.md): carry build/gpu-check there and run
# scripts/gpu-check.sh run from the repository's root.
.PHONY: gpu-check-bundle
gpu-check-bundle: deps
	GO=$(GO) scripts/gpu-check.sh build build/gpu-check

# The Debian packages (issue 33, docs/operating.md "Installing"):
# build/deb/vgpud_VERSION_amd64.deb (vgpud, vgpuctl, vgpud.service, the
# config) and build/deb/vgpud-guest_VERSION_amd64.deb (the guest ICD,
# vgpu-icdd, vgpu-agent), with dpkg-deb (scripts/build-deb.sh).
.PHONY: deb deb-root guest-os test-deb
deb: deps icd
	GO=$(GO) scripts/build-deb.sh build/deb

# The Debian root test-deb boots (scripts/deb-root.sh), cached under build/.
deb-root:
	scripts/deb-root.sh build/deb-root

# The ordinary Debian VM test-deb installs vgpud-guest in
# (scripts/guest-os.sh: Debian's kernel and initramfs, systemd), cached.
guest-os:
	scripts/guest-os.sh build/guest-os

# Both packages for real (needs root). vgpud: installed with dpkg in a
# Debian root booted with systemd (systemd-nspawn -b): start, the group's
# socket, five upgrades in place under systemd while a VM computes on an
# instance, stop, purge (scripts/test-deb.sh). vgpud-guest: the same
# root's services and ICD; then installed with apt in an ordinary Debian VM
# booted with systemd and a vGPU, where Debian's clinfo and pyopencl run
# through it as an unprivileged user (tests/guestos_test.go).
test-deb: deb deb-root guest guest-os
	scripts/test-deb.sh build/deb build/deb-root $(GUEST)
	$(GO) test -tags guestos -count=1 -timeout 30m -v -run '^TestGuestPackage$$' ./tests/

# Xen for real (issue 30, docs/xen.md "Under real Xen"): Xen 4.20 booted
# in QEMU 11.1 (the VMM root) under TCG with emulated AMD SVM+NPT, a
# Debian trixie dom0 (scripts/xen-root.sh, cached in build/xen-root),
# vgpud in dom0 serving an HVM domU through its ioreq server, vgpu-suite
# in the domU. Tens of minutes under TCG: not part of make test.
.PHONY: xen-root test-xen
xen-root:
	scripts/xen-root.sh build/xen-root

test-xen: deps kernel vmm-root xen-root
	scripts/test-xen.sh

clean:
	rm -rf build
