#!/usr/bin/env bash
# Installs into a temp DESTDIR, checks every file landed, that a real
# config is never overwritten, and verifies the systemd unit.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
make -s install DESTDIR="$dest" PREFIX=/usr/local >/dev/null
for f in usr/local/bin/vgpud usr/local/bin/vgpuctl usr/local/bin/vgpu-hook \
	usr/local/libexec/vgpu/vgpuctl-libvirt usr/local/libexec/vgpu/vgpu-nvml etc/modules-load.d/vgpu.conf \
	usr/local/lib/systemd/system/vgpud.service etc/vgpud/config.yaml usr/local/share/doc/vgpu/examples/config.yaml \
	usr/local/share/man/man1/vgpuctl.1.gz usr/local/share/man/man8/vgpud.8.gz usr/local/share/man/man8/vgpu-hook.8.gz \
	usr/local/share/vgpu/profiles/amd-mi25.yaml usr/local/share/doc/vgpu/agent.md usr/local/share/doc/vgpu/install.md \
	usr/local/share/doc/vgpu/vgpud-gim.conf usr/local/share/bash-completion/completions/vgpuctl \
	usr/local/share/zsh/site-functions/_vgpuctl usr/local/share/fish/vendor_completions.d/vgpuctl.fish; do
	[[ -e $dest/$f ]] || { echo "test-install: $f missing" >&2; exit 1; }
done
# vgpusim is a test tool run from bin/: nothing on a host uses it.
[[ ! -e $dest/usr/local/bin/vgpusim ]] || { echo "test-install: vgpusim installed; it is a test tool" >&2; exit 1; }
# The config installed where none was manages nothing, and vgpud takes it
# (docs/install.md): a host with GPUs is left as it is.
grep -qx 'version: v1' "$dest/etc/vgpud/config.yaml" && ! grep -q '^gpus:' "$dest/etc/vgpud/config.yaml" ||
	{ echo "test-install: the installed config.yaml is not the one that manages nothing" >&2; exit 1; }
grep -q '/usr/local/share/doc/vgpu/examples/config.yaml' "$dest/etc/vgpud/config.yaml" ||
	{ echo "test-install: config.yaml does not point at the example in DOCDIR" >&2; exit 1; }
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
# The completions are vgpuctl's and load in bash.
bash -c "source '$dest/usr/local/share/bash-completion/completions/vgpuctl' && complete -p vgpuctl" >/dev/null ||
	{ echo "test-install: the bash completion does not load" >&2; exit 1; }
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
