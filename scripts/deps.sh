#!/usr/bin/env bash
# Installs what vgpu needs on a fresh Debian 12 machine, and nothing that is
# already there. Run as root (CI and the README's commands do).
set -euo pipefail

# Debian packages: pci.ids gives GPU names (pkg/inventory looks them up;
# its tests compare every entry with ghw's pcidb);
# libvirt-dev and pkg-config build pkg/virt (cgo, libvirt.org/go/libvirt);
# mdevctl is the third-party tool e2e/simhost's interop test runs against vgpusim;
# libvirt's daemons, virsh and QEMU run e2e/libvirt's integration tests and
# benchmarks (a private libvirtd with vgpu-hook, domains under TCG), and
# iproute2's ip and tc the link between two of them (veth, tbf, netem);
# systemd gives systemd-analyze, which make test-install verifies the unit with;
# binutils' readelf shows it that vgpuctl and the hook are static;
# make test-package checks the .deb with lintian, its Depends with
# dpkg-dev's dpkg-shlibdeps and the .rpm with rpm, reads man pages with
# man-db, and installs the .deb (its Depends and Recommends are above);
# containerd (with ctr) and runc run e2e/kubelet's real kubelet's pods.
pkgs=(pci.ids libvirt-dev pkg-config mdevctl systemd binutils
	libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 iproute2
	lintian rpm dpkg-dev man-db containerd runc)
for extra in "$@"; do pkgs+=("$extra"); done

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# vgpusim (make demo, the process-level tests) serves FUSE; Debian builds
# fuse as a module that loads on first open, but not in every container.
if [[ ! -e /dev/fuse ]]; then
	modprobe fuse 2>/dev/null || true
	if [[ ! -e /dev/fuse ]]; then
		echo "deps: /dev/fuse is missing and modprobe fuse failed; vgpusim needs FUSE" >&2
		exit 1
	fi
fi

if ! command -v go >/dev/null 2>&1; then
	if [[ -x /usr/local/go/bin/go ]]; then
		echo "deps: go is at /usr/local/go/bin; add it to PATH" >&2
	else
		echo "deps: Go 1.26 is required (https://go.dev/dl); not found on PATH" >&2
	fi
	exit 1
fi
go mod download
# e2e/kubelet is a module of its own (k8s.io/kubernetes stays out of the
# main one): its modules, the kubelet's among them.
(cd e2e/kubelet && go mod download)
