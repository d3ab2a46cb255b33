#!/usr/bin/env bash
# scripts/package.sh VERSION OUTDIR: packs what `make install-files`
# installs with PREFIX=/usr into OUTDIR/vgpu_VERSION-1_ARCH.deb and
# OUTDIR/vgpu-VERSION-1.ARCH.rpm with nfpm (go tool nfpm). make package
# builds the binaries, man pages and completions first, with VERSION.
#
# The file list is make install's: each package is the tree make install
# makes, staged, so the two cannot drift. What differs by distribution is
# passed to make install as directories (zsh's completion directory), or
# is packaging metadata make install has no business with (copyright,
# changelog, lintian overrides). docs/install.md says where files go.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

version=${1:?usage: package.sh VERSION OUTDIR}
out=${2:?usage: package.sh VERSION OUTDIR}
release=1
maintainer=${PKG_MAINTAINER:-vgpu maintainers <maintainers@users.noreply.a-seed-a99073ee.example>}
homepage=https://github.com/vgpu-project/vgpu

die() {
	echo "package: $*" >&2
	exit 1
}

[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "version $version is not a valid Debian/RPM version (scripts/version.sh)"
arch=$(go env GOARCH)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# stage FORMAT [make variables]: make install into $out/root-FORMAT.
stage() {
	local fmt=$1
	shift
	rm -rf "$out/root-$fmt"
	make -s --no-print-directory install-files DESTDIR="$out/root-$fmt" PREFIX=/usr SYSCONFDIR=/etc \
		UNITDIR=/usr/lib/systemd/system MODULESLOADDIR=/usr/lib/modules-load.d "$@" >/dev/null
}
stage deb ZSHCOMPDIR=/usr/share/zsh/vendor-completions
stage rpm

# The binaries must be the ones built for this version.
got=$("$out/root-deb/usr/bin/vgpuctl" --version)
[[ $got == "vgpuctl version $version" ]] ||
	die "bin/vgpuctl says '$got', not version $version: run make package, which builds with VERSION"

# Shared-library needs of the cgo helpers, read from their ELF version
# needs as dpkg-shlibdeps and rpm's elfdeps do: the highest symbol version
# of each library is the oldest release that has every symbol used.
# vgpu-nvml loads NVML with dlopen: only libc shows. libvirt's four
# libraries (libvirt, -qemu, -lxc, -admin) are all in Debian's libvirt0
# and Fedora's libvirt-libs; libvirt versions its symbols LIBVIRT_X.Y.Z,
# as libvirt0 (>= X.Y.Z) names them.
deb_depends=() rpm_requires=()
declare -A maxver=() debver=()
elfs=("$out/root-deb/usr/libexec/vgpu/"*)
# "LIB VERSION" for every symbol version the helpers need.
while read -r lib ver; do
	cur=${maxver[$lib]:-}
	if [[ -z $cur ]] || [[ $(printf '%s\n%s\n' "$cur" "$ver" | sort -V | tail -1) == "$ver" ]]; then
		maxver[$lib]=$ver
	fi
done < <(for f in "${elfs[@]}"; do
	LC_ALL=C readelf -V --wide "$f" |
		awk '/File: /{for(i=1;i<NF;i++) if($i=="File:") lib=$(i+1)} /Name: /{for(i=1;i<NF;i++) if($i=="Name:") print lib, $(i+1)}'
done | sort -u)
needed=$(for f in "${elfs[@]}"; do LC_ALL=C readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done | sort -u)
for lib in $needed; do
	case $lib in
	libc.so.6) deb=libc6 prefix=GLIBC_ ;;
	libvirt.so.0) deb=libvirt0 prefix=LIBVIRT_ ;;
	libvirt-qemu.so.0) deb=libvirt0 prefix=LIBVIRT_QEMU_ ;;
	libvirt-lxc.so.0) deb=libvirt0 prefix=LIBVIRT_LXC_ ;;
	libvirt-admin.so.0) deb=libvirt0 prefix=LIBVIRT_ADMIN_ ;;
	*) die "a helper needs $lib, which package.sh cannot name a package for: add it" ;;
	esac
	ver=${maxver[$lib]:-}
	rpm_requires+=("$lib()(64bit)")
	[[ -n $ver ]] && rpm_requires+=("$lib($ver)(64bit)")
	[[ $ver =~ ^${prefix}([0-9][0-9.]*)$ ]] || die "$lib: symbol version '$ver' is not $prefix<version>"
	ver=${BASH_REMATCH[1]} cur=${debver[$deb]:-}
	if [[ -z $cur ]] || [[ $(printf '%s\n%s\n' "$cur" "$ver" | sort -V | tail -1) == "$ver" ]]; then
		debver[$deb]=$ver
	fi
done
for deb in $(printf '%s\n' "${!debver[@]}" | sort); do
	deb_depends+=("$deb (>= ${debver[$deb]})")
done

# copyright FORMAT: vgpu's notice and every Go module linked into the
# shipped binaries with its licence files (go version -m lists them), and
# Go's own. Debian points at /usr/share/common-licenses for the Apache
# and LGPL texts (its policy 12.5); RPM has no such directory.
copyright() {
	local fmt=$1 mods dir f
	cat <<EOF
vgpu: virtual GPUs for libvirt/KVM hosts
Source: $homepage

Copyright: the vgpu authors (the git history names them).
License: the vgpu repository does not state a licence yet.

The binaries are static Go programs (vgpuctl-libvirt and vgpu-nvml link
libc, and vgpuctl-libvirt libvirt, dynamically): they contain the Go
standard library and these Go modules, under the licences that follow.
EOF
	printf '\n%s\n' "Go $(go env GOVERSION), the Go Authors:"
	licence_text "$fmt" "$(go env GOROOT)/LICENSE"
	mods=$(for b in "$out/root-$fmt/usr/bin/"* "$out/root-$fmt/usr/libexec/vgpu/"*; do
		go version -m "$b" | awk '$1=="dep"{print $2, $3}'
	done | sort -u)
	while read -r path ver; do
		dir=$(go list -m -f '{{.Dir}}' "$path" 2>/dev/null) || die "module $path is not in the module cache: go mod download"
		[[ -n $dir ]] || die "module $path is not in the module cache: go mod download"
		printf '\n%s\n' "$path $ver:"
		local found=""
		for f in "$dir"/*; do
			case ${f##*/} in
			LICENSE* | LICENCE* | License* | COPYING* | NOTICE* | PATENTS*)
				licence_text "$fmt" "$f"
				found=1
				;;
			esac
		done
		[[ -n $found ]] || die "module $path has no licence file in $dir"
	done <<<"$mods"
}

# licence_text FORMAT FILE: the file indented, or on Debian a pointer to
# the common licence it is.
licence_text() {
	local fmt=$1 f=$2
	if [[ $fmt == deb ]]; then
		if grep -qi 'terms and conditions for use, reproduction, and distribution' "$f" && grep -q 'Apache License' "$f"; then
			echo " The Apache License 2.0: /usr/share/common-licenses/Apache-2.0 on Debian systems."
			return
		fi
		if grep -q 'GNU LESSER GENERAL PUBLIC LICENSE' "$f" && grep -q 'Version 2.1' "$f"; then
			echo " The GNU Lesser General Public License 2.1: /usr/share/common-licenses/LGPL-2.1 on Debian systems."
			return
		fi
	fi
	# Indented, blank lines as " ." (Debian's copyright format).
	sed -e 's/[[:space:]]*$//' -e 's/^/ /' -e 's/^ $/ ./' "$f"
}

meta=$out/meta
rm -rf "$meta"
mkdir -p "$meta"
copyright deb >"$meta/copyright.deb"
copyright rpm >"$meta/copyright.rpm"

# Debian's changelog: one entry for this build; the git history is the
# record of changes.
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
date=$(git log -1 --format=%cD 2>/dev/null || date -R)
{
	echo "vgpu ($version-$release) unstable; urgency=medium"
	echo
	echo "  * Built from git commit $commit."
	echo "    The git history lists the changes."
	echo
	echo " -- $maintainer  $date"
} | gzip -9n >"$meta/changelog.Debian.gz"

# contents FORMAT: every file make install staged, /etc files as
# conffiles an upgrade never overwrites once changed (and docs as %doc in
# the .rpm), and the directories only vgpu uses (the rest belong to the
# system: rpm -qlp shows no /usr/bin).
contents() {
	local fmt=$1 root=$out/root-$fmt rel type mode
	echo "contents:"
	while IFS= read -r rel; do
		echo "  - dst: /$rel"
		echo "    type: dir"
		echo "    file_info: {mode: 0$(stat -c %a "$root/$rel")}"
	done < <(cd "$root" && find . -mindepth 1 -type d -path '*vgpu*' -printf '%P\n' | sort)
	while IFS= read -r rel; do
		type=""
		case $fmt:$rel in
		*:etc/*) type="config|noreplace" ;;
		rpm:usr/share/doc/* | rpm:usr/share/man/*) type=doc ;; # %doc: rpm -qd lists them
		esac
		mode=$(stat -c %a "$root/$rel")
		echo "  - src: $root/$rel"
		echo "    dst: /$rel"
		[[ -n $type ]] && echo "    type: $type"
		echo "    file_info: {mode: 0$mode}"
	done < <(cd "$root" && find . -type f -printf '%P\n' | sort)
	case $fmt in
	deb)
		cat <<EOF
  - src: $meta/copyright.deb
    dst: /usr/share/doc/vgpu/copyright
    file_info: {mode: 0644}
  - src: $meta/changelog.Debian.gz
    dst: /usr/share/doc/vgpu/changelog.Debian.gz
    file_info: {mode: 0644}
  - src: packaging/deb/lintian-overrides
    dst: /usr/share/lintian/overrides/vgpu
    file_info: {mode: 0644}
EOF
		;;
	rpm)
		cat <<EOF
  - dst: /usr/share/licenses/vgpu
    type: dir
    file_info: {mode: 0755}
  - src: $meta/copyright.rpm
    dst: /usr/share/licenses/vgpu/copyright
    type: license
    file_info: {mode: 0644}
EOF
		;;
	esac
}

# yaml_list INDENT ITEM...: a YAML list of quoted strings.
yaml_list() {
	local indent=$1 item
	shift
	for item in "$@"; do printf '%s- "%s"\n' "$indent" "$item"; done
}

# config FORMAT: nfpm's config for one format.
config() {
	local fmt=$1
	cat <<EOF
name: vgpu
arch: $arch
platform: linux
version: "$version"
version_schema: none
release: "$release"
section: admin
priority: optional
maintainer: "$maintainer"
homepage: $homepage
license: unstated
vendor: vgpu
description: |-
  Virtual GPUs for virtual machines on libvirt/KVM hosts
  vgpu splits GPUs into equal vGPUs (SR-IOV VFs, VFIO mediated devices,
  NVIDIA vGPU types, MIG-backed vGPU) by profile, and hands them to libvirt
  domains: vgpud, the host agent, keeps the host at /etc/vgpud/config.yaml
  from boot, before libvirt starts VMs; vgpuctl lists, carves, attaches and
  migrates; vgpu-hook is libvirt's qemu hook (vgpuctl hook install).
EOF
	contents "$fmt"
	case $fmt in
	deb)
		echo "depends:"
		yaml_list "  " "${deb_depends[@]}"
		# The agent and vgpuctl run without libvirt's daemons; the hook,
		# vgpud's watch of domains, attach and migrate need them.
		echo "recommends:"
		yaml_list "  " libvirt-daemon-system libvirt-daemon-driver-qemu pci.ids
		echo "suggests:"
		yaml_list "  " mdevctl
		cat <<EOF
scripts:
  postinstall: packaging/deb/postinst
  preremove: packaging/deb/prerm
  postremove: packaging/deb/postrm
EOF
		;;
	rpm)
		echo "depends:"
		yaml_list "  " "${rpm_requires[@]}"
		echo "recommends:"
		yaml_list "  " libvirt-daemon-kvm hwdata
		cat <<EOF
scripts:
  postinstall: packaging/rpm/post
  preremove: packaging/rpm/preun
  postremove: packaging/rpm/postun
rpm:
  summary: Virtual GPUs for virtual machines on libvirt/KVM hosts
  group: System Environment/Daemons
  compression: gzip
EOF
		;;
	esac
}

for fmt in deb rpm; do
	config "$fmt" >"$out/nfpm-$fmt.yaml"
	rm -f "$out"/*."$fmt"
	go tool nfpm package --config "$out/nfpm-$fmt.yaml" --packager "$fmt" --target "$out/" >/dev/null
done
ls "$out"/*.deb "$out"/*.rpm
