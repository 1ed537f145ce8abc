#!/usr/bin/env bash
# install-deps.sh: install what vgpud needs from Debian's packages, if it is
# not there yet: QEMU (qemu-system-x86_64 with x-pci-proxy-dev), the OpenCL
# ICD loader and headers, PoCL as the CPU OpenCL platform, and libvirt
# (libvirtd, virtlogd and the qemu driver; virsh) for libvirt-managed VMs,
# and Xen's headers (libxen-dev), which xen/xenctl's layout test compiles
# against; debootstrap and systemd-container (systemd-nspawn), with which
# make test-deb boots a Debian root to install the packages in; pyopencl,
# its own tests and pytest (python3-pyopencl, python-pyopencl-doc,
# python3-pytest), which tests/icdhost runs on PoCL and through the ICD,
# ffmpeg, whose OpenCL filters tests/icdhost and the guest test run
# on PoCL directly for the reference frames, and spirv-tools, whose
# spirv-as checks that the committed SPIR-V test modules are their
# sources assembled.
# Idempotent; needs root (or sudo) only when something is missing.
# Another apt-get or dpkg holding the lock is waited for (up to 10 minutes),
# not an error.
set -euo pipefail

pkgs=(qemu-system-x86 ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo gcc libvirt-daemon-system libvirt-clients libxen-dev debootstrap systemd-container
	python3-pyopencl python-pyopencl-doc python3-pytest ffmpeg spirv-tools)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || { echo "install-deps: need root to install ${missing[*]}" >&2; exit 1; }
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
lock=(-o DPkg::Lock::Timeout=600)
"${sudo[@]}" apt-get "${lock[@]}" update -qq
"${sudo[@]}" apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
