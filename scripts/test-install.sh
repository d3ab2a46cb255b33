#!/usr/bin/env bash
# Installs into a temp DESTDIR, checks every file landed, that a real
# config is never overwritten, and verifies the systemd unit.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
make -s install DESTDIR="$dest" PREFIX=/usr/local >/dev/null
for f in usr/local/bin/vgpud usr/local/bin/vgpuctl usr/local/bin/vgpu-hook usr/local/bin/vgpusim \
	usr/local/libexec/vgpu/vgpuctl-libvirt usr/local/libexec/vgpu/vgpu-nvml etc/modules-load.d/vgpu.conf \
	usr/local/lib/systemd/system/vgpud.service etc/vgpud/config.yaml.example \
	usr/local/share/man/man1/vgpuctl.1 usr/local/share/man/man8/vgpud.8 \
	usr/local/share/vgpu/profiles/amd-mi25.yaml usr/local/share/doc/vgpu/agent.md \
	usr/local/share/doc/vgpu/vgpud-gim.conf; do
	[[ -e $dest/$f ]] || { echo "test-install: $f missing" >&2; exit 1; }
done
# vgpuctl, the hook and vgpud are static (they never load libvirt or
# NVML); attach and detach find the libvirt build, and MIG-backed profiles
# the NVML helper, where make install put them.
for f in usr/local/bin/vgpuctl usr/local/bin/vgpu-hook usr/local/bin/vgpud; do
	if readelf -d "$dest/$f" 2>/dev/null | grep -q NEEDED; then
		echo "test-install: $f links shared libraries; it must be static" >&2
		exit 1
	fi
done
# vgpu-nvml dlopens libnvidia-ml through libc: it must be a cgo build.
readelf -d "$dest/usr/local/libexec/vgpu/vgpu-nvml" | grep -q 'NEEDED.*libc\.so' ||
	{ echo "test-install: vgpu-nvml is not a cgo build; it cannot load NVML" >&2; exit 1; }
readelf -d "$dest/usr/local/libexec/vgpu/vgpuctl-libvirt" | grep -q 'NEEDED.*libvirt\.so' ||
	{ echo "test-install: vgpuctl-libvirt does not link libvirt" >&2; exit 1; }
out=$(VGPUCTL_LIBVIRT= "$dest/usr/local/bin/vgpuctl" --socket "$dest/none.sock" attach test --profile t4-4q -c test:///default)
grep -q 'attached 1 x t4-4q to test (config)' <<<"$out" ||
	{ echo "test-install: vgpuctl attach did not reach libvirt through vgpuctl-libvirt: $out" >&2; exit 1; }
grep -q '^ExecStart=/usr/local/bin/vgpud ' "$dest/usr/local/lib/systemd/system/vgpud.service"
# A real config survives a second install.
echo "version: v1 # mine" >"$dest/etc/vgpud/config.yaml"
make -s install DESTDIR="$dest" PREFIX=/usr/local >/dev/null
grep -q mine "$dest/etc/vgpud/config.yaml" || { echo "test-install: install overwrote config.yaml" >&2; exit 1; }
if command -v systemd-analyze >/dev/null; then
	# verify checks that ExecStart exists and that man finds the Documentation
	# page, so install once more with PREFIX inside the temp dir.
	make -s install DESTDIR= PREFIX="$dest/prefix" SYSCONFDIR="$dest/prefix/etc" >/dev/null
	MANPATH="$dest/prefix/share/man:" systemd-analyze verify "$dest/prefix/lib/systemd/system/vgpud.service"
	# and with the old-GIM drop-in the docs tell admins to install
	install -D -m 0644 "$dest/prefix/share/doc/vgpu/vgpud-gim.conf" "$dest/prefix/lib/systemd/system/vgpud.service.d/gim.conf"
	MANPATH="$dest/prefix/share/man:" systemd-analyze verify "$dest/prefix/lib/systemd/system/vgpud.service"
	echo "test-install: systemd-analyze verify passed"
else
	echo "test-install: systemd-analyze missing; unit not verified (apt-get install systemd)" >&2
	exit 1
fi
echo "test-install: ok ($dest)"
