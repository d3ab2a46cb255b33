#!/usr/bin/env bash
# Prints vgpu's version as Debian and RPM both order it, from the git tag:
#   v1.2.0 at HEAD                -> 1.2.0
#   v1.2.0-rc1 at HEAD            -> 1.2.0~rc1        (before 1.2.0)
#   3 commits after v1.2.0        -> 1.2.0+git20260102150405.3.g1a2b3c4
#   no tag yet                    -> 0.0.0~git20260102150405.1a2b3c4
# A tree with uncommitted changes gets .dirty appended. The timestamp is
# HEAD's commit time in UTC, so later commits sort later without a tag.
# Debian and RPM (4.10+) both sort ~ before anything, even the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "version.sh: not a git checkout; set PKG_VERSION" >&2
	exit 1
fi
sha=$(git rev-parse --short=7 HEAD)
when=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
dirty=""
git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty

if desc=$(git describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
	# vX.Y.Z[-pre]-N-gSHA
	tag=${desc%-*-g*}
	n=${desc%-g*}
	n=${n##*-}
	base=${tag#v}
	base=${base/-/\~} # v1.2.0-rc1: a pre-release sorts before 1.2.0
	if [[ $n == 0 ]]; then
		v=$base
	else
		v=$base+git$when.$n.g$sha
	fi
else
	v=0.0.0~git$when.$sha
fi
v=$v$dirty
# Debian upstream versions start with a digit and hold [A-Za-z0-9.+~];
# RPM's Version takes the same set (no '-').
if [[ ! $v =~ ^[0-9][A-Za-z0-9.+~]*$ ]]; then
	echo "version.sh: tag gives $v, which is not a valid Debian/RPM version; tag as vX.Y.Z" >&2
	exit 1
fi
echo "$v"
