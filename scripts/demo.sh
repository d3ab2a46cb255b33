#!/usr/bin/env bash
# The README's main job on a simulated GPU host: vgpusim serves a host with an
# AMD MI25 (a generic SR-IOV stand-in), an NVIDIA T4, an NVIDIA L40S and Intel
# GVT-g over FUSE, and the real vgpuctl lists, carves and uncarves it; then a
# host with an old-GIM AMD S7150, one with an Intel Arc Pro B50 on xe, one with
# an NVIDIA H100 (MIG) and L40S whose NVML vgpusim serves, and one with an AMD
# Instinct MI300X on new GIM.
# `make demo` installs and builds first.
# Each part of the tour is a function; later capabilities add theirs to main.
# Whatever happens, the trap stops vgpusim and checks nothing is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."

HOST=${HOST:-examples/hosts/mixed.yaml}
BIN=${BIN:-bin}
MI25=0000:03:00.0
T4=0000:3b:00.0
S7150=0000:3d:00.0
B50=0000:05:00.0
H100=0000:cb:00.0
L40S=0000:86:00.0
MI300X=0000:05:00.0

tmp="" mnt="" sim_pid="" vgpud_pid=""

if [[ -t 1 ]]; then bold=$'\e[1m' dim=$'\e[2m' off=$'\e[0m'; else bold="" dim="" off=""; fi

heading() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
say() { printf '%s%s%s\n' "$dim" "$*" "$off"; }

# vgpuctl runs the real CLI against the simulated host, echoing the command
# as an admin would type it on a real one.
vgpuctl() {
	printf '%s$ vgpuctl %s%s\n' "$bold" "$*" "$off"
	"$BIN/vgpuctl" --sysfs-root "$mnt" --state-dir "$tmp/state" --socket "$tmp/vgpud.sock" "$@"
}

preflight() {
	if [[ $(id -u) -ne 0 ]]; then
		echo "demo: vgpusim mounts a FUSE filesystem: run as root (sudo make demo)" >&2
		exit 1
	fi
	if [[ ! -e /dev/fuse ]]; then
		echo "demo: /dev/fuse is missing: modprobe fuse (scripts/deps.sh tries)" >&2
		exit 1
	fi
	for b in vgpusim vgpuctl vgpud; do
		if [[ ! -x $BIN/$b ]]; then
			echo "demo: $BIN/$b is not built: run make demo (or make build)" >&2
			exit 1
		fi
	done
}

start_sim() {
	tmp=$(mktemp -d /tmp/vgpu-demo.XXXXXX)
	mnt=$tmp/mnt
	heading "A simulated host: $HOST"
	say "vgpusim serves the fake kernel at $mnt over FUSE: $mnt/sys and $mnt/dev/vfio"
	say "behave as /sys and /dev/vfio do, so vgpuctl runs unmodified with --sysfs-root $mnt."
	start_sim_process
}

start_sim_process() {
	rm -f "$tmp/ready"
	"$BIN/vgpusim" serve --host "$HOST" --mount "$mnt" --control "$tmp/control.sock" \
		--ready-file "$tmp/ready" 2>"$tmp/vgpusim.log" &
	sim_pid=$!
	wait_ready vgpusim "$sim_pid" "$tmp/vgpusim.log" 200 test -s "$tmp/ready"
}

# wait_ready NAME PID LOG TRIES CMD...: polls CMD every 0.1 s until it
# succeeds; fails, with LOG, if process PID (NAME) exits first or TRIES
# polls go by.
wait_ready() {
	local name=$1 pid=$2 log=$3 tries=$4
	shift 4
	for _ in $(seq "$tries"); do
		"$@" && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "demo: $name exited before it was ready:" >&2
			cat "$log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "demo: $name not ready after $((tries / 10))s:" >&2
	cat "$log" >&2
	return 1
}

tour_inventory() {
	heading "What GPUs does this host have, and how can each be split?"
	vgpuctl gpus
	heading "The profile catalog: equal splits of one GPU model, 1:1 to 16:1"
	vgpuctl profiles --gpu "$MI25"
	vgpuctl profiles --gpu "$T4"
}

tour_carve() {
	heading "Carve the MI25 4:1: SR-IOV, 4 VFs on vfio-pci, 4 GB each"
	vgpuctl carve "$MI25" --profile mi25-4g
	heading "Carve the T4 16:1: 16 mediated devices of type GRID T4-1Q, 1 GB each"
	vgpuctl carve "$T4" --profile t4-1q
	heading "Carving again what is already there does nothing"
	vgpuctl carve "$MI25" --profile mi25-4g
}

tour_vgpus() {
	heading "The vGPUs, their IOMMU groups, and whether a VM uses them"
	vgpuctl vgpus
}

# tour_in_use holds a VF's VFIO group open, as QEMU does for a running VM:
# vgpuctl refuses to destroy it (exit 3) until it is released.
tour_in_use() {
	local group
	group=$(vf_group "$MI25" 0)
	heading "A vGPU in use is never destroyed: hold /dev/vfio/$group open, as QEMU would"
	refused_while_held "$group" uncarve "$MI25"
}

# vf_group prints the IOMMU group of VF $2 of PF $1.
vf_group() {
	basename "$(readlink "$mnt/sys/bus/pci/devices/$1/virtfn$2/iommu_group")"
}

# refused_while_held runs vgpuctl with the rest of its arguments while
# /dev/vfio/$1 is held open, as QEMU holds it, and fails the demo unless
# vgpuctl refuses (exit 3).
refused_while_held() {
	local group=$1 rc=0
	shift
	exec {vfio}<>"$mnt/dev/vfio/$group"
	vgpuctl "$@" || rc=$?
	exec {vfio}>&-
	if [[ $rc -ne 3 ]]; then
		echo "demo: vgpuctl $* with a vGPU in use exited $rc, expected 3 (refused)" >&2
		return 1
	fi
	say "(exit 3: refused; the VM's vGPU is untouched)"
	wait_released "/dev/vfio/$group"
}

# wait_released waits until vgpusim has seen the last close of a node: FUSE
# delivers the release just after close(2) returns.
wait_released() {
	for _ in $(seq 100); do
		"$BIN/vgpusim" opens --control "$tmp/control.sock" --path "$1" | grep -q '"count":0' && return 0
		sleep 0.05
	done
	echo "demo: $1 still open after 5s" >&2
	return 1
}

tour_uncarve() {
	heading "Uncarve both GPUs: back to how the host booted"
	vgpuctl uncarve "$MI25"
	vgpuctl uncarve "$T4"
	vgpuctl vgpus
}

# tour_agent hands the host to vgpud: a declarative config, asserted, then
# reconciled by the agent at its start (as at boot, before libvirt), and
# changed later with vgpuctl apply. vgpuctl talks to vgpud over its socket.
tour_agent() {
	cat >"$tmp/config.yaml" <<-YAML
		version: v1
		gpus:
		  - address: "$MI25"
		    profile: mi25-4g
		  - id: "10de:1eb8"
		    profile: t4-4q
		on-release: keep
	YAML
	heading "The host config vgpud keeps the host at (/etc/vgpud/config.yaml on a real host)"
	cat "$tmp/config.yaml"
	heading "Does the host match it? (exit 1 and the drift: nothing is carved yet)"
	local rc=0
	vgpuctl assert -f "$tmp/config.yaml" || rc=$?
	if [[ $rc -ne 1 ]]; then
		echo "demo: assert of an uncarved host exited $rc, expected 1 (drift)" >&2
		return 1
	fi
	start_vgpud
	heading "vgpud reconciled the host at start; now it matches"
	vgpuctl assert -f "$tmp/config.yaml"
	vgpuctl vgpus
	heading "Change the T4 to 16:1 with vgpuctl apply: vgpud re-carves it"
	sed -i 's/t4-4q/t4-1q/' "$tmp/config.yaml"
	vgpuctl apply -f "$tmp/config.yaml"
	heading "A reboot: VFs and mdevs are gone; vgpud brings them back before libvirt starts VMs"
	stop_vgpud
	restart_sim
	start_vgpud
	vgpuctl assert -f "$tmp/config.yaml"
	stop_vgpud
}

start_vgpud() {
	say "starting vgpud --sysfs-root $mnt (its log: $tmp/vgpud.log)"
	"$BIN/vgpud" --config "$tmp/config.yaml" --sysfs-root "$mnt" --state-dir "$tmp/vgpud" \
		--socket "$tmp/vgpud.sock" --libvirt-uri "" 2>"$tmp/vgpud.log" &
	vgpud_pid=$!
	wait_ready vgpud "$vgpud_pid" "$tmp/vgpud.log" 300 vgpud_answers
}

# vgpud_answers: the socket answers after the first reconcile (READY for
# systemd).
vgpud_answers() {
	"$BIN/vgpuctl" --socket "$tmp/vgpud.sock" --sysfs-root "$mnt" vgpus >/dev/null 2>&1 &&
		[[ -S $tmp/vgpud.sock ]]
}

stop_vgpud() {
	[[ -n $vgpud_pid ]] || return 0
	kill -TERM "$vgpud_pid" 2>/dev/null || true
	wait "$vgpud_pid" 2>/dev/null || true
	vgpud_pid=""
}

# restart_sim starts a fresh simulated host on the same mount point: no VFs,
# no mdevs, every driver as at boot, like a real host after a reboot.
restart_sim() {
	stop_sim
	start_sim_process
	vgpuctl vgpus
}

stop_sim() {
	kill -TERM "$sim_pid"
	wait "$sim_pid" 2>/dev/null || true
	sim_pid=""
}

# switch_host stops this simulated host and serves the host file $1 ($2
# says what it holds) on the same mount point.
switch_host() {
	HOST=$1
	heading "Another simulated host: $2 ($HOST)"
	stop_sim
	start_sim_process
}

# tour_gim moves to a host with an old-GIM S7150: GIM enables its VFs when it
# loads, from its vf_num, so a split that needs another count reloads it.
tour_gim() {
	switch_host examples/hosts/s7150.yaml "an AMD FirePro S7150 on old GIM"
	say "GIM binds no driver to the PF and enabled all 16 VFs (onto pci-stub) when it loaded."
	vgpuctl gpus
	heading "Split it 4:1: sriov_numvfs refuses GIM GPUs, so vgpuctl reloads gim with vf_num=4"
	vgpuctl carve "$S7150" --profile s7150-2g --dry-run
	vgpuctl carve "$S7150" --profile s7150-2g
	say "GIM saved the count for the next boot:"
	grep vf_num "$mnt/etc/gim_config"
	heading "The same split with GIM's liquid scheduler: a reload with the same count"
	vgpuctl carve "$S7150" --profile s7150-2g-liquid
	vgpuctl vgpus
	vgpuctl uncarve "$S7150"
}

# tour_xe moves to a host with an Intel Arc Pro B50 on xe: VFs through
# sriov_numvfs, then the profile's VF scheduling in sriov_admin/.
tour_xe() {
	switch_host examples/hosts/arc-pro-b50.yaml "an Intel Arc Pro B50 on xe"
	heading "Split it 4:1 with strict 20 ms time slices (the profile's xe scheduling)"
	vgpuctl carve "$B50" --profile b50-4g-sliced
	say "xe's sriov_admin/vf1 (VF 0 above: xe counts VFs from 1) now holds, as every VF does:"
	for a in exec_quantum_ms preempt_timeout_us sched_priority; do
		printf '  %s: %s\n' "$a" "$(cat "$mnt/sys/bus/pci/devices/$B50/sriov_admin/vf1/profile/$a")"
	done
	vgpuctl vgpus
	vgpuctl uncarve "$B50"
}

# tour_nvml moves to an NVIDIA vGPU 17+ host whose state NVML alone shows:
# MIG-backed vGPU on an H100 (MIG mode, GPU instances, then a type per VF;
# the catalog names the H100's types, NVML gives their ids) and the
# time-sliced scheduler on an L40S. vgpusim serves the host's NVML under
# the mount, where vgpuctl finds it as it would libnvidia-ml.
tour_nvml() {
	switch_host examples/hosts/nvidia-nvml.yaml "an NVIDIA H100 and A100 (MIG) and an L40S on vGPU 17+"
	heading "MIG-backed vGPU on the H100: seven 1g.10gb GPU instances, each behind one VF"
	vgpuctl carve "$H100" --profile h100-1-10c
	vgpuctl vgpus
	heading "Re-split to 3g.40gb: the types go, the instances change, the types come back"
	vgpuctl carve "$H100" --profile h100-3-40c
	vgpuctl vgpus
	heading "An L40S 4:1 with the fixed-share scheduler in 2 ms slices (set through NVML)"
	vgpuctl carve "$L40S" --profile l40s-12q-fixed
	vgpuctl gpus
	vgpuctl uncarve "$H100"
	vgpuctl uncarve "$L40S"
}

# tour_newgim moves to a host with an MI300X on new GIM: gim binds the PF and
# enables its VFs itself; the count changes only with amd-smi, which GIM
# refuses while a VF is in use.
tour_newgim() {
	switch_host examples/hosts/mi300x.yaml "an AMD Instinct MI300X on new GIM"
	say "gim is bound to the PF and enabled vf_num VFs (1 after a fresh install) when it probed it."
	vgpuctl gpus
	heading "Split it 8:1 (CPX): gim refuses sriov_numvfs, so vgpuctl sets the count with amd-smi"
	vgpuctl carve "$MI300X" --profile mi300x-24g --dry-run
	vgpuctl carve "$MI300X" --profile mi300x-24g
	printf '%s$ amd-smi static --gpu=%s --num-vf%s\n' "$bold" "$MI300X" "$off"
	"$mnt/usr/bin/amd-smi" static --gpu="$MI300X" --num-vf
	local group
	group=$(vf_group "$MI300X" 2)
	heading "Back to 1:1 while a VM holds VF 2 (/dev/vfio/$group open): refused, nothing changes"
	refused_while_held "$group" carve "$MI300X" --profile mi300x-192g
	vgpuctl carve "$MI300X" --profile mi300x-192g
	heading "Uncarve: the VF leaves vfio-pci; gim keeps it"
	vgpuctl uncarve "$MI300X"
}

# cleanup stops vgpusim and proves nothing is left: no mount, no process,
# no temp dir. It runs on every exit, failed steps and Ctrl-C included.
cleanup() {
	local rc=$? leftover=0
	set +e
	stop_vgpud
	if [[ -n $sim_pid ]] && kill -0 "$sim_pid" 2>/dev/null; then
		kill -TERM "$sim_pid"
		for _ in $(seq 100); do kill -0 "$sim_pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$sim_pid" 2>/dev/null; then
			echo "demo: vgpusim ignored SIGTERM for 10s; killing it" >&2
			kill -KILL "$sim_pid"
			leftover=1
		fi
		wait "$sim_pid" 2>/dev/null
	fi
	if [[ -n $mnt ]] && grep -qF " $mnt " /proc/self/mountinfo; then
		echo "demo: $mnt is still mounted; unmounting it" >&2
		umount -l "$mnt"
		leftover=1
	fi
	if [[ -n $sim_pid ]] && kill -0 "$sim_pid" 2>/dev/null; then
		echo "demo: vgpusim (pid $sim_pid) is still running" >&2
		leftover=1
	fi
	if [[ -n $tmp ]]; then
		if ((rc != 0)) && [[ -s $tmp/vgpusim.log ]]; then
			echo "demo: vgpusim's log:" >&2
			cat "$tmp/vgpusim.log" >&2
		fi
		rm -rf "$tmp"
	fi
	if ((leftover)); then
		rc=1
	elif ((rc != 0)); then
		echo "demo: stopped early (exit $rc); cleaned up: nothing mounted, no vgpusim, temp files gone" >&2
	elif [[ -n $sim_pid ]]; then
		heading "Cleaned up: vgpusim stopped, nothing mounted, temp files gone"
	fi
	exit "$rc"
}

main() {
	preflight
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	start_sim
	tour_inventory
	tour_carve
	tour_vgpus
	tour_in_use
	tour_uncarve
	tour_agent
	tour_gim
	tour_xe
	tour_nvml
	tour_newgim
}

main "$@"
