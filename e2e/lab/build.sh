#!/usr/bin/env bash
# Builds the real-kernel lab from nothing on a Debian 12 machine, or reuses
# the one already built from the same recipe, and prints its directory.
#
# The lab is a Debian 13 (trixie) root: kernel 6.12, QEMU 10, libvirt 11,
# the kernel's sample mdev drivers (mtty, mbochs, mdpy) built from Debian's
# kernel source, and an initramfs that mounts that root read-only over 9p
# under a tmpfs overlay. run.sh boots it. See docs/lab.md.
#
# Cache: $VGPU_LAB_CACHE (default /var/cache/vgpu-lab)/<hash>, where <hash>
# is the sha256 of the recipe (this script, packages.txt, initramfs-init,
# lab-init, mdev.mk). A changed recipe builds a new lab; an unchanged one is
# reused. Older labs are removed after a successful build.
#
# Usage: build.sh [--print-hash]     (root; output: the lab directory)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VGPU_LAB_CACHE:-/var/cache/vgpu-lab}
recipe=(build.sh packages.txt initramfs-init lab-init mdev.mk)

say() { echo "lab build: $*" >&2; }
die() {
	say "FAILED: $*"
	exit 1
}

hash=$(cd "$here" && cat "${recipe[@]}" | sha256sum | cut -c1-16) || die "hashing the recipe"
if [[ ${1:-} == --print-hash ]]; then
	echo "$hash"
	exit 0
fi
lab=$cache/$hash
if [[ -f $lab/done ]]; then
	echo "$lab"
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "building the lab needs root (debootstrap, chroot, mounts)"

mkdir -p "$cache"
# One build at a time per cache.
exec 9>"$cache/.lock"
flock 9
if [[ -f $lab/done ]]; then
	echo "$lab"
	exit 0
fi

start=$SECONDS
work=$cache/$hash.tmp
rm -rf "$work"
mkdir -p "$work"
log=$work/build.log
say "building $lab (log: $lab/build.log)"

# step NAME CMD...: runs CMD with its output in the log; on failure shows
# the log's tail and names the step.
step() {
	local name=$1
	shift
	local t=$SECONDS
	echo "=== $name" >>"$log"
	if ! "$@" >>"$log" 2>&1; then
		tail -n 40 "$log" >&2
		die "$name (full log: $log)"
	fi
	say "$name: $((SECONDS - t)) s"
}

# --- the host's tools (Debian 12 packages)
host_pkgs=(debootstrap cpio xz-utils util-linux)
missing=()
for p in "${host_pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
host_install() {
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || say "warning: apt-get update reported errors; trying the install anyway"
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
if ((${#missing[@]})); then
	step "host packages (${missing[*]})" host_install
fi

root=$work/root
# Everything that runs in the root runs in a private mount namespace with
# /proc, /sys and /dev/pts mounted, so nothing stays mounted on the host.
in_root() {
	unshare --mount --propagation private -- bash -euo pipefail -c '
		r=$1; shift
		mount -t proc proc "$r/proc"
		mount -t sysfs sys "$r/sys"
		mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"
		exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
			DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"
	' in_root "$root" "$@"
}

# --- Debian 13 userland
step "debootstrap trixie (minbase)" debootstrap --variant=minbase trixie "$root"
printf '#!/bin/sh\n# the lab root never starts services while packages install\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
mapfile -t pkgs < <(grep -v -e '^#' -e '^[[:space:]]*$' "$here/packages.txt")
step "apt-get update in the root" in_root apt-get update -q
step "apt-get install ${#pkgs[@]} packages in the root" in_root apt-get install -y -q --no-install-recommends "${pkgs[@]}"

kvers=("$root"/lib/modules/*)
((${#kvers[@]} == 1)) || die "expected one kernel in the root, found: ${kvers[*]##*/}"
kver=${kvers[0]##*/}
[[ -f $root/boot/vmlinuz-$kver ]] || die "no /boot/vmlinuz-$kver in the root"

# --- the sample mdev drivers, built against the root's kernel
mkdir -p "$root/usr/src/vgpu-lab-mdev"
cp "$here/mdev.mk" "$root/usr/src/vgpu-lab-mdev/Kbuild"
build_samples() {
	in_root bash -euo pipefail -c '
		kver=$1
		cd /usr/src
		src=$(ls -d linux-source-*.tar.xz | head -n1)
		tar -xJf "$src" --wildcards "*/samples/vfio-mdev/*"
		cp linux-source-*/samples/vfio-mdev/*.c linux-source-*/samples/vfio-mdev/*.h vgpu-lab-mdev/ 2>/dev/null ||
			cp linux-source-*/samples/vfio-mdev/*.c vgpu-lab-mdev/
		rm -rf linux-source-*/
		make -C "/usr/src/linux-headers-$kver" M=/usr/src/vgpu-lab-mdev CONFIG_DEBUG_INFO_BTF_MODULES= modules
		mkdir -p "/lib/modules/$kver/updates/vgpu-lab"
		install -m 0644 /usr/src/vgpu-lab-mdev/*.ko "/lib/modules/$kver/updates/vgpu-lab/"
		depmod "$kver"
		for m in mtty mbochs mdpy vfio_pci 9p 9pnet_virtio overlay; do
			modinfo -k "$kver" -F filename "$m" >/dev/null
		done
	' build_samples "$kver"
}
step "build mtty, mbochs, mdpy for $kver" build_samples

# --- the guest's init and the mount points run.sh uses
install -m 0755 "$here/lab-init" "$root/usr/local/sbin/lab-init"
mkdir -p "$root/srv/lab" "$root/lab"

# --- the initramfs: static busybox and the modules that mount the root
make_initramfs() {
	local ir=$work/initramfs
	rm -rf "$ir"
	mkdir -p "$ir/bin" "$ir/modules"
	install -m 0755 "$root/bin/busybox" "$ir/bin/busybox"
	file_is_static "$ir/bin/busybox"
	install -m 0755 "$here/initramfs-init" "$ir/init"
	local seen=" " m f name
	for m in 9p 9pnet_virtio overlay; do
		while read -r _ f _; do
			name=$(basename "$f")
			name=${name%.xz}
			[[ $seen == *" $name "* ]] && continue
			seen+="$name "
			if [[ $f == *.xz ]]; then
				xz -dc "$root$f" >"$ir/modules/$name"
			else
				cp "$root$f" "$ir/modules/$name"
			fi
			echo "$name" >>"$ir/modules.order"
		done < <(in_root modprobe -S "$kver" --show-depends "$m" | grep '^insmod ')
	done
	(cd "$ir" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$root/boot/lab-initramfs.img"
	rm -rf "$ir"
}
file_is_static() {
	# A static binary has no program interpreter.
	if LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'program interpreter'; then
		echo "$1 is not static" >&2
		return 1
	fi
}
command -v readelf >/dev/null || file_is_static() { :; }
step "initramfs" make_initramfs
ln -sf "vmlinuz-$kver" "$root/boot/lab-vmlinuz"

# --- slim down: package caches, the kernel source tarball, the distro initrd
slim() {
	in_root apt-get clean
	rm -f "$root"/usr/src/linux-source-*.tar.xz "$root"/boot/initrd.img-*
}
step "clean up" slim

cat >"$work/info" <<EOF
hash=$hash
kernel=$kver
qemu=$(in_root qemu-system-x86_64 --version | head -n1)
libvirt=$(in_root libvirtd --version | head -n1)
built=$(date -u +%FT%TZ)
seconds=$((SECONDS - start))
EOF
touch "$work/done"
rm -rf "$lab"
mv "$work" "$lab"
say "done in $((SECONDS - start)) s: $lab"

# Older labs: remove the complete ones (a failed build's .tmp is removed by
# its next try). VGPU_LAB_KEEP=1 keeps them.
if [[ ${VGPU_LAB_KEEP:-0} != 1 ]]; then
	for old in "$cache"/*/; do
		old=${old%/}
		[[ $old == "$lab" || ! -f $old/done ]] && continue
		say "removing the old lab $old"
		rm -rf "$old"
	done
fi
echo "$lab"
