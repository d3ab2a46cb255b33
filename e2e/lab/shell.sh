#!/usr/bin/env bash
# make lab-shell: builds the project's binaries into a fresh share (bin/ on
# the guest's PATH, the lab's test catalog in profiles/) and boots the lab
# with a root shell on the serial console. Exit the shell to power off.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
go=${GO:-go}
command -v "$go" >/dev/null || go=/usr/local/go/bin/go

share=$(mktemp -d /tmp/vgpu-lab-shell.XXXXXX)
trap 'rm -rf "$share"' EXIT
mkdir -p "$share/bin"
cp -r "$here/profiles" "$share/profiles"
echo "lab shell: building vgpuctl and the guest tests into $share/bin" >&2
(cd "$repo" && CGO_ENABLED=1 "$go" build -o "$share/bin/vgpuctl" ./cmd/vgpuctl) ||
	{ echo "lab shell: FAILED: go build ./cmd/vgpuctl" >&2; exit 1; }
(cd "$repo" && CGO_ENABLED=0 "$go" test -c -tags labguest -o "$share/bin/guest.test" ./e2e/lab/guest) ||
	{ echo "lab shell: FAILED: go test -c ./e2e/lab/guest" >&2; exit 1; }
echo "lab shell: in the guest: vgpuctl --profiles /lab/profiles gpus; guest.test -test.v" >&2
"$here/run.sh" --shell "$share"
