#!/usr/bin/env bash
# Tests the packages as an admin installs them, on this Debian machine (root):
#   - builds two versions of the .deb and .rpm (make package): "previous"
#     (VERSION~prev) and "new" (VERSION), VERSION from scripts/version.sh;
#   - lintian finds no error or warning in the new .deb (the overrides it
#     ships say why each is overridden);
#   - the .rpm holds what the .deb holds (rpm -qip, -qlp, --scripts,
#     --requires), where rpm is installed;
#   - apt-get install ./vgpu_PREV.deb installs it, apt resolving its
#     dependencies; vgpuctl --version, man vgpuctl, the completions, the
#     helpers in /usr/libexec/vgpu and the unit work from where they landed;
#   - the packaged vgpud takes the shipped config (it manages nothing) on a
#     simulated host (vgpusim, from bin/) and carves a GPU by hand; a VFIO
#     group is held open as a running VM holds it;
#   - the config is changed and the libvirt hook installed as an admin
#     would; apt-get install ./vgpu_NEW.deb upgrades: the changed config and
#     the ledger are byte for byte the same, the hook is refreshed, and the
#     new vgpud finds the carved GPU and the held vGPU as they were;
#   - dpkg -r leaves the config, the ledger, the hook and the unit's
#     enablement; dpkg -P leaves nothing, and says what it removes.
# Files are listed before and after each step, where the package and its
# scripts write. It installs into the real system, so it refuses to run
# where vgpu is installed or has state, and purges what it installed on any
# exit. This machine has no systemd as PID 1: what the scripts do under it
# (start, restart on upgrade, stop) is not run here, and the test says so.
# Took 7 minutes on the shared 2-core machine at a load of 11-15 with Go's
# build cache warm (the builds 3, lintian 1.5, each apt-get install 0.5).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
export DEBIAN_FRONTEND=noninteractive

HOOK=/etc/libvirt/hooks/qemu.d/vgpu
MI25=0000:03:00.0
BIN=${BIN:-bin}

say() { echo "test-package: $*"; }
fail() {
	echo "test-package: FAIL: $*" >&2
	exit 1
}

[[ $(id -u) -eq 0 ]] || fail "run as root: it installs vgpu into this system"
for c in dpkg-deb apt-get lintian man; do
	command -v "$c" >/dev/null || fail "$c is missing (make deps)"
done
[[ -e /dev/fuse ]] || fail "/dev/fuse is missing: vgpusim needs FUSE (make deps)"

# Refuse to touch a vgpu this test did not install, or its state.
status=$(dpkg-query -W -f='${db:Status-Abbrev}' vgpu 2>/dev/null || true)
if [[ -n ${status// /} && $status != un* ]]; then
	fail "a vgpu package is on this machine (dpkg status '$status'), not installed by this test: remove it first"
fi
for p in /etc/vgpud /var/lib/vgpud /run/vgpud/vgpud.sock "$HOOK" /usr/lib/systemd/system/vgpud.service \
	/etc/systemd/system/multi-user.target.wants/vgpud.service; do
	if [[ -e $p || -L $p ]]; then
		fail "$p exists: this machine has vgpu state the test's purge would remove; move it away first"
	fi
done

tmp=$(mktemp -d /tmp/vgpu-test-package.XXXXXX)
chmod 0755 "$tmp" # apt's _apt user reads the .deb files from here
mnt=$tmp/mnt sim_pid="" vgpud_pid="" installed="" held=""
# vgpuctl hook install makes libvirt's qemu.d where it is missing: the
# test removes it again then.
hooks_d_made=""
[[ -d ${HOOK%/*} ]] || hooks_d_made=1

stop_vgpud() {
	[[ -n $vgpud_pid ]] || return 0
	kill -TERM "$vgpud_pid" 2>/dev/null || true
	wait "$vgpud_pid" 2>/dev/null || true
	vgpud_pid=""
}

cleanup() {
	local rc=$?
	set +e
	trap - ERR
	[[ -n $held ]] && exec {held}>&-
	stop_vgpud
	if [[ -n $sim_pid ]]; then
		kill -TERM "$sim_pid" 2>/dev/null
		wait "$sim_pid" 2>/dev/null
	fi
	grep -qF " $mnt " /proc/self/mountinfo && umount -l "$mnt"
	if [[ -n $installed ]] && dpkg-query -W vgpu >/dev/null 2>&1; then
		dpkg -P vgpu >/dev/null 2>&1 || echo "test-package: could not purge vgpu; run dpkg -P vgpu" >&2
	fi
	if [[ -n $installed ]]; then
		rm -rf /var/lib/vgpud /etc/vgpud "$HOOK"
	fi
	if [[ -n $hooks_d_made ]]; then rmdir "${HOOK%/*}" 2>/dev/null; fi
	if ((rc != 0)); then
		for f in "$tmp"/*.log; do
			[[ -s $f ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
		done
		if [[ -n $installed ]]; then
			echo "test-package: failed; the vgpu it installed was purged and its state removed" >&2
		else
			echo "test-package: failed before installing anything" >&2
		fi
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "test-package: FAIL: line $LINENO: $BASH_COMMAND exited $?" >&2' ERR

# The maintainer scripts are POSIX sh (dash runs the .deb's).
for f in packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm packaging/rpm/post packaging/rpm/preun \
	packaging/rpm/postun; do
	sh -n "$f" || fail "$f: not valid sh"
done

start=$SECONDS
version=$(scripts/version.sh)
prev=$version~prev
say "building $prev and $version (make package)"
make -s --no-print-directory package PKG_VERSION="$prev" PKGDIR="$tmp/prev" >"$tmp/build-prev.log" 2>&1 ||
	fail "make package $prev failed (log above)"
make -s --no-print-directory package PKG_VERSION="$version" PKGDIR="$tmp/new" >"$tmp/build-new.log" 2>&1 ||
	fail "make package $version failed (log above)"
arch=$(dpkg --print-architecture)
deb_prev=$tmp/prev/vgpu_${prev}-1_$arch.deb
deb_new=$tmp/new/vgpu_${version}-1_$arch.deb
rpm_new=$(ls "$tmp"/new/vgpu-*.rpm)
[[ -f $deb_prev && -f $deb_new ]] || fail "make package made no vgpu_VERSION-1_$arch.deb"
say "built in $((SECONDS - start)) s"

# lintian: no error, no warning (info tags are printed, not failed on).
t=$SECONDS
if ! lintian --fail-on error,warning "$deb_new" >"$tmp/lintian.log" 2>&1; then
	cat "$tmp/lintian.log" >&2
	fail "lintian found errors or warnings in $(basename "$deb_new")"
fi
say "lintian: no error or warning ($((SECONDS - t)) s)"

# files_deb DEB / files_rpm RPM: "MODE PATH" of each regular file.
files_deb() { dpkg-deb -c "$1" | awk '$1 ~ /^-/ {sub(/^\./, "", $6); print $1, $6}' | sort; }
files_rpm() { rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$1" | awk '$1 ~ /^-/' | sort; }

if command -v rpm >/dev/null; then
	info=$(rpm -qip "$rpm_new")
	grep -q "^Version *: $version\$" <<<"$info" || fail "rpm -qip: version is not $version: $info"
	# The same files with the same modes, but for where each distribution
	# wants zsh completions and its copyright/licence metadata.
	norm() { sed -e 's|/usr/share/zsh/vendor-completions/|/usr/share/zsh/site-functions/|' \
		-e '\|/usr/share/doc/vgpu/copyright$|d' -e '\|/usr/share/doc/vgpu/changelog.Debian.gz$|d' \
		-e '\|/usr/share/lintian/overrides/vgpu$|d' -e '\|/usr/share/licenses/vgpu/copyright$|d' | sort; }
	if ! diff <(files_deb "$deb_new" | norm) <(files_rpm "$rpm_new" | norm) >"$tmp/rpm-diff.log"; then
		cat "$tmp/rpm-diff.log" >&2
		fail "the .rpm and the .deb hold different files (< deb, > rpm)"
	fi
	rpm -qp --configfiles "$rpm_new" | grep -x /etc/vgpud/config.yaml >/dev/null ||
		fail "rpm: /etc/vgpud/config.yaml is not a config file"
	rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm_new" | grep -x 'cn /etc/vgpud/config.yaml' >/dev/null ||
		fail "rpm: /etc/vgpud/config.yaml is not %config(noreplace)"
	rpm -qp --docfiles "$rpm_new" | grep -x /usr/share/man/man1/vgpuctl.1.gz >/dev/null ||
		fail "rpm: the man pages are not %doc"
	# It owns its own directories only: /usr/bin and the like are the system's.
	foreign=$(rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm_new" | awk '$1 ~ /^d/ && $2 !~ /vgpu/ {print $2}')
	[[ -z $foreign ]] || fail "rpm: owns directories that are not vgpu's: $foreign"
	scripts=$(rpm -qp --scripts "$rpm_new")
	for want in 'systemd-update-helper install-system-units vgpud.service' 'systemctl --no-reload preset vgpud.service' \
		'systemd-update-helper remove-system-units vgpud.service' 'systemctl --no-reload disable --now vgpud.service' \
		'systemd-update-helper mark-restart-system-units vgpud.service' 'systemctl try-restart vgpud.service'; do
		grep -qF "$want" <<<"$scripts" || fail "rpm --scripts: no '$want'"
	done
	if grep -q 'hook install' <<<"$scripts" && ! grep -q "\[ -f \"\$hook\" \]" <<<"$scripts"; then
		fail "rpm --scripts: the hook is installed without the admin asking"
	fi
	requires=$(rpm -qp --requires "$rpm_new")
	for want in 'libc.so.6()(64bit)' 'libvirt.so.0()(64bit)'; do
		grep -qxF "$want" <<<"$requires" || fail "rpm --requires: no $want: $requires"
	done
	say "rpm: $(rpm -qlp "$rpm_new" | wc -l) paths, the .deb's files, %config(noreplace) config.yaml, systemd scriptlets, requires $(grep -c . <<<"$requires") sonames"
else
	say "rpm is not installed: the .rpm is not checked (apt-get install rpm)"
fi

# dpkg's view of the package: its Depends match dpkg-shlibdeps' where
# dpkg-dev is installed.
depends=$(dpkg-deb -f "$deb_new" Depends)
if command -v dpkg-shlibdeps >/dev/null; then
	mkdir -p "$tmp/shl/debian" "$tmp/shl/x"
	printf 'Source: vgpu\n\nPackage: vgpu\nArchitecture: any\n' >"$tmp/shl/debian/control"
	dpkg-deb -x "$deb_new" "$tmp/shl/x"
	want=$(cd "$tmp/shl" && dpkg-shlibdeps -O x/usr/libexec/vgpu/* 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
	[[ $depends == "$want" ]] || fail "Depends is '$depends'; dpkg-shlibdeps says '$want'"
fi

# snapshot: every path the package or its scripts may leave, one a line.
# Not /run/vgpud: systemd makes and removes it with vgpud (no vgpud runs
# under systemd here), and e2e/libvirt makes it as a mount point.
snapshot() {
	local d
	{
		for d in /etc/vgpud /var/lib/vgpud /usr/libexec/vgpu /usr/share/vgpu /usr/share/doc/vgpu; do
			if [[ -e $d ]]; then find "$d"; fi
		done
		for d in /usr/bin /usr/lib/systemd/system /usr/lib/modules-load.d /usr/share/man/man1 /usr/share/man/man8 \
			/usr/share/bash-completion/completions /usr/share/zsh /usr/share/fish /usr/share/lintian/overrides \
			/etc/systemd/system /var/lib/systemd /etc/libvirt/hooks; do
			if [[ -e $d ]]; then find "$d" -name '*vgpu*'; fi
		done
	} | sort -u
}
before=$(snapshot)

# apt_install DEB: as an admin installs a downloaded package.
apt_install() {
	apt-get install -y -o DPkg::Lock::Timeout=600 "$1" >"$tmp/apt.log" 2>&1 || {
		cat "$tmp/apt.log" >&2
		fail "apt-get install $1 failed"
	}
}

pkgs_before=$(dpkg-query -W -f='${Package}\n' | sort)
installed=1
t=$SECONDS
apt_install "$deb_prev"
say "apt-get install ./$(basename "$deb_prev"): installed in $((SECONDS - t)) s"
extra=$(comm -13 <(echo "$pkgs_before") <(dpkg-query -W -f='${Package}\n' | sort) | grep -vx vgpu || true)
[[ -z $extra ]] || say "apt also installed (left installed): $(echo $extra)"
[[ $(dpkg-query -W -f='${Version}' vgpu) == "$prev-1" ]] || fail "dpkg says vgpu $(dpkg-query -W -f='${Version}' vgpu), not $prev-1"

check_installed() {
	local v=$1 out
	out=$(/usr/bin/vgpuctl --version)
	[[ $out == "vgpuctl version $v" ]] || fail "/usr/bin/vgpuctl --version: $out, want $v"
	out=$(/usr/bin/vgpud --version 2>&1)
	[[ $out == "vgpud $v" ]] || fail "/usr/bin/vgpud --version: $out, want $v"
	out=$(/usr/libexec/vgpu/vgpu-nvml --version 2>&1)
	[[ $out == "vgpu-nvml $v" ]] || fail "vgpu-nvml --version: $out, want $v"
	if [[ $(command -v vgpuctl) != /usr/bin/vgpuctl ]]; then
		say "note: vgpuctl on PATH is $(command -v vgpuctl) (a make install?), not the package's"
	fi
}
check_installed "$prev"

# Where an admin looks: the man pages, the completions, the helpers, the unit.
man -P cat vgpuctl 2>/dev/null | grep 'vgpuctl - ' >/dev/null || fail "man vgpuctl shows no page"
man -P cat 8 vgpud 2>/dev/null | grep 'vgpud - ' >/dev/null || fail "man 8 vgpud shows no page"
man -P cat 8 vgpu-hook 2>/dev/null | grep 'vgpu-hook - ' >/dev/null || fail "man 8 vgpu-hook shows no page"
man -P cat vgpuctl-carve 2>/dev/null | grep 'vgpuctl-carve' >/dev/null || fail "man vgpuctl-carve shows no page"
bash -c 'source /usr/share/bash-completion/completions/vgpuctl && complete -p vgpuctl' >/dev/null ||
	fail "the bash completion does not load"
for f in /usr/share/zsh/vendor-completions/_vgpuctl /usr/share/fish/vendor_completions.d/vgpuctl.fish; do
	[[ -s $f ]] || fail "$f is missing"
done
missing=$(ldd /usr/libexec/vgpu/vgpuctl-libvirt | grep 'not found' || true)
[[ -z $missing ]] || fail "vgpuctl-libvirt lacks libraries: $missing"
# vgpuctl finds vgpuctl-libvirt in ../libexec/vgpu with no flag or variable.
out=$(env -u VGPUCTL_LIBVIRT /usr/bin/vgpuctl --socket "$tmp/none.sock" attach test --profile t4-4q -c test:///default 2>&1) ||
	fail "vgpuctl attach through /usr/libexec/vgpu/vgpuctl-libvirt: $out"
grep -q 'attached 1 x t4-4q to test (config)' <<<"$out" || fail "vgpuctl attach: $out"
# The built-in catalog needs no flag; the shipped copy reads as a catalog.
/usr/bin/vgpuctl profiles | grep '^mi25-4g ' >/dev/null || fail "vgpuctl profiles lacks mi25-4g"
/usr/bin/vgpuctl --profiles /usr/share/vgpu/profiles profiles >/dev/null || fail "/usr/share/vgpu/profiles is not a catalog"
if command -v systemd-analyze >/dev/null; then
	systemd-analyze verify /usr/lib/systemd/system/vgpud.service 2>"$tmp/verify.log" ||
		fail "systemd-analyze verify: $(cat "$tmp/verify.log")"
fi
grep -q '^ExecStart=/usr/bin/vgpud ' /usr/lib/systemd/system/vgpud.service || fail "the unit does not run /usr/bin/vgpud"
# postinst enabled the unit, as dh_installsystemd does, without systemd.
# deb-systemd-helper links /lib/systemd/system, the same directory on
# Debian 12's merged /usr.
[[ $(readlink -f /etc/systemd/system/multi-user.target.wants/vgpud.service) == /usr/lib/systemd/system/vgpud.service ]] ||
	fail "postinst did not enable vgpud.service (no multi-user.target.wants link)"
[[ -d /run/systemd/system ]] && say "systemd is PID 1 here: postinst started vgpud"
[[ ! -e $HOOK ]] || fail "the package installed the libvirt hook $HOOK; only the admin does"

# start_sim, start_vgpud: the packaged vgpud on a simulated host, with
# the shipped config and the real state directory (/var/lib/vgpud), on a
# private socket.
start_sim() {
	mkdir -p "$mnt"
	"$BIN/vgpusim" serve --host examples/hosts/mixed.yaml --mount "$mnt" --control "$tmp/control.sock" \
		--ready-file "$tmp/sim-ready" 2>"$tmp/vgpusim.log" &
	sim_pid=$!
	for _ in $(seq 300); do
		[[ -s $tmp/sim-ready ]] && return 0
		kill -0 "$sim_pid" 2>/dev/null || fail "vgpusim exited"
		sleep 0.1
	done
	fail "vgpusim not ready after 30 s"
}
start_vgpud() {
	/usr/bin/vgpud --config /etc/vgpud/config.yaml --sysfs-root "$mnt" --socket "$tmp/vgpud.sock" \
		--libvirt-uri "" 2>>"$tmp/vgpud.log" &
	vgpud_pid=$!
	for _ in $(seq 600); do
		[[ -S $tmp/vgpud.sock ]] && ctl vgpus >/dev/null 2>&1 && return 0
		kill -0 "$vgpud_pid" 2>/dev/null || fail "vgpud exited on the shipped config"
		sleep 0.1
	done
	fail "vgpud did not answer after 60 s"
}
ctl() { /usr/bin/vgpuctl --socket "$tmp/vgpud.sock" --sysfs-root "$mnt" "$@"; }
# host: vgpuctl reading the simulated host itself, not asking vgpud.
host() { /usr/bin/vgpuctl --socket "$tmp/none.sock" --sysfs-root "$mnt" "$@"; }
# mi25_vfs: how many VFs the MI25 has and how many vGPUs are in use.
mi25_vfs() {
	echo "$(cat "$mnt/sys/bus/pci/devices/$MI25/sriov_numvfs") vfs, $(host vgpus -o json | grep -c '"inUse": *true') in use"
}

start_sim
gpus_before=$(host gpus -o json)
start_vgpud
ctl assert -f /etc/vgpud/config.yaml >/dev/null || fail "vgpuctl assert -f on the shipped config: the host drifts"
[[ $(host gpus -o json) == "$gpus_before" ]] ||
	fail "vgpud on the shipped config changed the host"
# An admin carves the MI25 by hand through vgpud; a VM holds VF 0.
ctl carve "$MI25" --profile mi25-4g >/dev/null
group=$(basename "$(readlink "$mnt/sys/bus/pci/devices/$MI25/virtfn0/iommu_group")")
exec {held}<>"$mnt/dev/vfio/$group"
carved=$(mi25_vfs)
[[ $carved == "4 vfs, 1 in use" ]] || fail "after the carve: $carved, want 4 vfs, 1 in use"
stop_vgpud
say "the packaged vgpud took the shipped config (it changed nothing), then carved $MI25 by hand"

# The admin's changes: the config, and the hook.
printf '# changed by the admin\n' >>/etc/vgpud/config.yaml
/usr/bin/vgpuctl hook install >/dev/null
cmp -s /usr/bin/vgpu-hook "$HOOK" || fail "vgpuctl hook install did not copy /usr/bin/vgpu-hook"
config_sum=$(sha256sum </etc/vgpud/config.yaml)
ledger_sum=$(sha256sum </var/lib/vgpud/ledger.db)

t=$SECONDS
apt_install "$deb_new"
say "apt-get install ./$(basename "$deb_new"): upgraded in $((SECONDS - t)) s"
[[ $(dpkg-query -W -f='${Version}' vgpu) == "$version-1" ]] || fail "after the upgrade dpkg says vgpu $(dpkg-query -W -f='${Version}' vgpu)"
check_installed "$version"
[[ $(sha256sum </etc/vgpud/config.yaml) == "$config_sum" ]] || fail "the upgrade changed the admin's /etc/vgpud/config.yaml"
[[ $(sha256sum </var/lib/vgpud/ledger.db) == "$ledger_sum" ]] || fail "the upgrade changed the ledger"
cmp -s /usr/bin/vgpu-hook "$HOOK" || fail "the upgrade did not refresh the admin's hook $HOOK"
grep -q "refreshed the libvirt hook $HOOK" "$tmp/apt.log" || fail "postinst did not say it refreshed the hook"
start_vgpud
[[ $(mi25_vfs) == "$carved" ]] || fail "after the upgrade: $(mi25_vfs), want $carved"
grep -q "version=$version " "$tmp/vgpud.log" || fail "the vgpud that started after the upgrade is not $version"
stop_vgpud
exec {held}>&-
held=""
say "upgrade kept the changed config and the ledger byte for byte, refreshed the hook; the new vgpud found $MI25 as carved ($carved)"

# remove: vgpud's state, the config, the hook and the unit's enablement stay.
dpkg -r vgpu >"$tmp/remove.log" 2>&1 || {
	cat "$tmp/remove.log" >&2
	fail "dpkg -r vgpu failed"
}
left=$(comm -13 <(echo "$before") <(snapshot))
want_left="/etc/libvirt/hooks/qemu.d/vgpu
/etc/systemd/system/multi-user.target.wants/vgpud.service
/etc/vgpud
/etc/vgpud/config.yaml
/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/vgpud.service
/var/lib/systemd/deb-systemd-helper-enabled/vgpud.service.dsh-also
/var/lib/vgpud
$(cd / && find var/lib/vgpud -mindepth 1 | sed 's|^|/|' | sort)"
want_left=$(sort <<<"$want_left")
if [[ $left != "$want_left" ]]; then
	diff <(echo "$want_left") <(echo "$left") >&2 || true
	fail "dpkg -r left other paths than the config, the ledger, the hook and the unit's enablement (< wanted, > left)"
fi
grep -q 'the libvirt hook .* stays' "$tmp/remove.log" || fail "dpkg -r did not say the hook stays"
[[ $(dpkg-query -W -f='${db:Status-Abbrev}' vgpu) == "rc " ]] || fail "after dpkg -r vgpu is not in config-files state"
say "dpkg -r left $(wc -l <<<"$left") paths: the config, the ledger, the hook, the unit's enablement"

# purge: nothing is left, and each removal was announced.
dpkg -P vgpu >"$tmp/purge.log" 2>&1 || {
	cat "$tmp/purge.log" >&2
	fail "dpkg -P vgpu failed"
}
left=$(comm -13 <(echo "$before") <(snapshot))
[[ -z $left ]] || fail "dpkg -P left: $left"
for p in /var/lib/vgpud "$HOOK"; do
	grep -q "purge removes.* $p" "$tmp/purge.log" || fail "dpkg -P removed $p without saying so: $(cat "$tmp/purge.log")"
done
dpkg-query -W vgpu >/dev/null 2>&1 && [[ $(dpkg-query -W -f='${db:Status-Abbrev}' vgpu) != un* ]] &&
	fail "dpkg still knows vgpu after the purge"
installed=""
say "dpkg -P left nothing; it said it removes /var/lib/vgpud and the hook"

say "not checked here (no systemd as PID 1; the lab's systemd guest, issue 26 item 3): postinst's daemon-reload and start, the restart on upgrade, prerm's stop"
say "ok in $((SECONDS - start)) s"
