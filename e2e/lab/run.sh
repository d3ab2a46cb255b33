#!/usr/bin/env bash
# Boots the lab guest (build.sh builds it first when needed) with an
# emulated IOMMU, two SR-IOV devices (igb: Intel 82576, 7 VFs; QEMU's NVMe:
# 4 VFs), a two-function card (e1000e + HD audio) and the lab root shared
# read-only over 9p.
#
#   run.sh SHARE               runs SHARE/run in the guest, powers off, and
#                              exits with its status (SHARE/out/status);
#                              console output on stdout (SHARE/out/run.log
#                              has the script's own)
#   run.sh --shell [SHARE]     a root shell on the serial console (exit, or
#                              Ctrl-A x, powers off); SHARE (default: a
#                              temporary directory) is /lab in the guest
#
# SHARE is shared read-write as /lab; put the binaries in SHARE/bin (on the
# guest's PATH). Exit status 125: the guest did not get to the end of the
# script (boot failure, crash, timeout): the console output says why.
#
# Environment: VGPU_LAB_DIR (a built lab; default: build.sh's), VGPU_LAB_TIMEOUT
# (seconds, default 900), VGPU_LAB_MEM (default 2G), VGPU_LAB_APPEND (extra
# kernel command line), VGPU_LAB_NET (a private link to another lab guest:
# QEMU's -netdev socket options, listen=127.0.0.1:PORT on one guest and
# connect=127.0.0.1:PORT on the other; with lab.ip=ADDR/LEN in
# VGPU_LAB_APPEND, its virtio-net interface gets ADDR), VGPU_LAB_MAC (its MAC
# address), VGPU_LAB_SYSTEMD=1 (systemd as PID 1: the initramfs hands over to
# e2e/lab/systemd-init instead of the root's lab-init; SHARE/vgpu.deb is
# installed; see systemd-init).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() {
	echo "lab run: FAILED: $*" >&2
	exit 125
}

shell=0
if [[ ${1:-} == --shell ]]; then
	shell=1
	shift
fi
share=${1:-}
tmpshare=
if [[ -z $share ]]; then
	((shell)) || die "usage: run.sh SHARE | run.sh --shell [SHARE]"
	tmpshare=$(mktemp -d /tmp/vgpu-lab-share.XXXXXX)
	share=$tmpshare
fi
[[ -d $share ]] || die "share $share is not a directory"
share=$(cd "$share" && pwd)
[[ $(id -u) -eq 0 ]] || die "the lab needs root (chroot, mounts)"

lab=${VGPU_LAB_DIR:-}
if [[ -z $lab ]]; then
	lab=$("$here/build.sh" | tail -n1) || die "building the lab (see the messages above)"
fi
[[ -f $lab/done ]] || die "$lab is not a built lab (no $lab/done)"
root=$lab/root

mkdir -p "$share/out"
rm -f "$share/out/status"
# The NVMe PF needs a namespace behind it: a small sparse image.
truncate -s 64M "$share/out/nvme.img"

initrd=/boot/lab-initramfs.img
if [[ ${VGPU_LAB_SYSTEMD:-0} == 1 ]]; then
	# The lab's initramfs, its last step pointed at systemd-init, which it
	# copies into the guest's root (the tmpfs overlay) first. The lab's
	# cached root and recipe stay as they are.
	ir=$(mktemp -d /tmp/vgpu-lab-initrd.XXXXXX)
	(cd "$ir" && gzip -dc "$root/boot/lab-initramfs.img" | cpio -id --quiet) || die "unpacking the lab's initramfs"
	install -m 0755 "$here/systemd-init" "$ir/systemd-init"
	grep -q '^exec switch_root /newroot /usr/local/sbin/lab-init$' "$ir/init" ||
		die "the lab's initramfs init does not end in switch_root to lab-init: update run.sh's systemd boot"
	sed -i 's|^exec switch_root /newroot /usr/local/sbin/lab-init$|cp /systemd-init /newroot/usr/local/sbin/lab-systemd-init \|\| fail "copy systemd-init"\nexec switch_root /newroot /usr/local/sbin/lab-systemd-init|' "$ir/init"
	(cd "$ir" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$share/out/initrd.img" || die "packing the systemd initramfs"
	rm -rf "$ir"
	initrd=/srv/lab/out/initrd.img
fi

append="console=ttyS0 intel_iommu=on iommu=pt panic=-1 loglevel=4 ${VGPU_LAB_APPEND:-}"
((shell)) && append+=" lab.shell=1"
serial=(-serial stdio)
# A terminal gets QEMU's monitor multiplexed (Ctrl-A x quits); a pipe gets
# the console alone.
((shell)) && [[ -t 0 ]] && serial=(-serial mon:stdio)

# One TCG thread for both vCPUs: with thread=multi, QEMU 10.0 aborted once
# in iotlb_to_section ("section_index < d->map.sections_nb") right after
# the guest enabled igb VFs (a vCPU racing the memory map change of the new
# BARs). The guest still has 2 CPUs; they take turns.
qemu=(
	qemu-system-x86_64 -accel tcg,thread=single -cpu max -m "${VGPU_LAB_MEM:-2G}" -smp 2
	-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on,caching-mode=on
	-display none -no-reboot -nodefaults -monitor none "${serial[@]}"
	-kernel /boot/lab-vmlinuz -initrd "$initrd" -append "$append"
	-virtfs local,path=/,mount_tag=root,security_model=none,readonly=on,multidevs=remap
	-virtfs local,path=/srv/lab,mount_tag=lab,security_model=none,multidevs=remap
	# igb: Intel 82576 (8086:10c9), sriov_totalvfs 7, VFs 8086:10ca
	-device pcie-root-port,id=rp0,chassis=1,slot=1
	-device igb,bus=rp0
	# QEMU NVMe (1b36:0010) with SR-IOV: 4 VFs; it needs a subsystem
	-device pcie-root-port,id=rp1,chassis=2,slot=2
	-device nvme-subsys,id=subsys0,nqn=vgpu-lab
	-device nvme,id=nvme0,serial=lab0,bus=rp1,subsys=subsys0,sriov_max_vfs=4,sriov_vq_flexible=8,sriov_vi_flexible=4
	-drive if=none,id=d0,file=/srv/lab/out/nvme.img,format=raw
	-device nvme-ns,drive=d0,bus=nvme0,nsid=1
	# A two-function card in one IOMMU group (no ACS): e1000e (8086:10d3) as
	# function 0, an HD audio controller (ICH9, 8086:293e) as function 1,
	# as a GPU and its HDMI audio: whole-card passthrough moves both
	-device pcie-root-port,id=rp2,chassis=3,slot=3
	-device e1000e,bus=rp2,addr=0.0,multifunction=on
	-device ich9-intel-hda,bus=rp2,addr=0.1
)
if [[ -n ${VGPU_LAB_NET:-} ]]; then
	qemu+=(-netdev "socket,id=n0,$VGPU_LAB_NET" -device "virtio-net-pci,netdev=n0,mac=${VGPU_LAB_MAC:-52:54:00:4c:41:01}")
fi

# QEMU runs inside the lab root (QEMU 10 has igb; the host's 7.2 does not),
# in a private mount namespace: /proc there (without it every write through
# the 9p overlay fails ENOENT) and SHARE on /srv/lab vanish with it.
rc=0
unshare --mount --propagation private -- bash -euo pipefail -c '
	r=$1 share=$2 timeout=$3 shell=$4
	shift 4
	mount -t proc proc "$r/proc"
	mount --bind "$share" "$r/srv/lab"
	if ((shell)); then
		exec timeout --foreground -k 10 "$timeout" chroot "$r" "$@"
	fi
	exec timeout -k 10 "$timeout" chroot "$r" "$@" </dev/null
' run "$root" "$share" "${VGPU_LAB_TIMEOUT:-900}" "$shell" "${qemu[@]}" || rc=$?
[[ -n $tmpshare ]] && rm -rf "$tmpshare"
((shell)) && exit 0

rm -f "$share/out/nvme.img" "$share/out/initrd.img"
if [[ ! -f $share/out/status ]]; then
	((rc == 124)) && die "the guest timed out after ${VGPU_LAB_TIMEOUT:-900} s"
	die "the guest stopped before the end of its script (QEMU exit $rc)"
fi
exit "$(cat "$share/out/status")"
