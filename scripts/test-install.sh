#!/usr/bin/env bash
# Installs into a temp DESTDIR, checks every file landed, that a real
# config is never overwritten, and verifies the systemd unit.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
make -s install DESTDIR="$dest" PREFIX=/usr/local >/dev/null
for f in usr/local/bin/vgpud usr/local/bin/vgpuctl usr/local/bin/vgpu-hook usr/local/bin/vgpusim \
	usr/local/lib/systemd/system/vgpud.service etc/vgpud/config.yaml.example \
	usr/local/share/man/man1/vgpuctl.1 usr/local/share/man/man8/vgpud.8 \
	usr/local/share/vgpu/profiles/amd-mi25.yaml usr/local/share/doc/vgpu/agent.md; do
	[[ -e $dest/$f ]] || { echo "test-install: $f missing" >&2; exit 1; }
done
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
	echo "test-install: systemd-analyze verify passed"
else
	echo "test-install: systemd-analyze missing; unit not verified (apt-get install systemd)" >&2
	exit 1
fi
echo "test-install: ok ($dest)"
