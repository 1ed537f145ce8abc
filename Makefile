# vgpud: `make demo` runs two VMs sharing one OpenCL device; `make test`
# runs the tests. Both install what they need from Debian's packages.

GO      ?= go
GUEST   := build/guest
BIN     := build/bin
GUESTPROGS := vgpu-init vgpu-suite vgpu-mmiobench
# Run time of the whole test suite is bounded well below CI's limit.
TESTFLAGS ?= -timeout 25m

.PHONY: all deps kernel guest build test test-short fuzz demo bench bench-interference clean

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

build: deps
	$(GO) build -o $(BIN)/vgpud ./cmd/vgpud
	$(GO) build -o $(BIN)/vgpuctl ./cmd/vgpuctl

test: deps kernel
	$(GO) vet ./...
	$(GO) test $(TESTFLAGS) ./...

# In-process tests only (no QEMU boots).
test-short: deps
	$(GO) test -short ./...

# A short run of every fuzz target.
fuzz:
	scripts/fuzz-all.sh 20s

demo: build guest
	scripts/demo.sh

# Every benchmark table (bench/README.md); each compares against a baseline
# measured in the same run.
bench: build guest
	$(GO) run ./bench/datapath
	$(GO) run ./bench/sched
	$(GO) run ./bench/reuse
	$(GO) run ./bench/sync
	$(GO) run ./bench/isolation
	$(GO) run ./bench/migrate
	$(GO) run ./bench/restart
	$(GO) run ./bench/placement -eval bench/interference/testdata/pocl-pthread-rerun.json

# The interference placement model's training data: every workload type
# alone and every pair at once on the device (docs/placement.md). Load it
# with vgpuctl place -dataset build/interference.json.
bench-interference: deps
	$(GO) run ./bench/interference -out build/interference.json
	$(GO) run ./bench/placement -dataset build/interference.json

clean:
	rm -rf build
