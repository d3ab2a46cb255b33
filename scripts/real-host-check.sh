#!/usr/bin/env bash
# A read-only check of vgpu on a real GPU host (issue 23), with binaries built
# elsewhere: the listings (vgpuctl gpus, gpus -o json, profiles --gpu for each
# GPU, vgpus), a dry-run carve of every profile that names each GPU's model,
# of those profiles --gpu lists and of passthrough, a vgpud with an empty
# config answering GET /v1/gpus and /v1/vgpus, and vgpuctl gpus timed against
# nvidia-smi -L. It prints a report for docs/real-hosts.md on stdout and exits
# 1 when any check fails (docs/real-hosts.md, "The check").
#
# It changes nothing: vgpuctl runs only gpus, profiles, vgpus and carve
# --dry-run (ctl refuses anything else), with its state directory and socket in
# a temp dir; the vgpud it starts has an empty config, its ledger and socket in
# that temp dir and no libvirt, and is stopped on exit. Nothing is written
# outside the temp dir, which is removed on exit.
set -uo pipefail

usage() {
	cat <<'EOF'
Usage: scripts/real-host-check.sh [--bin DIR] [--sysfs-root DIR] [--runs N]
                                  [--timing fail|warn|skip] [--nvidia-smi PATH]

  --bin DIR          where vgpuctl and vgpud are (default: $VGPU_BIN, else bin/
                     beside this script's directory); vgpu-nvml is used from there
  --sysfs-root DIR   the host's root (default /; a vgpusim mount for a test)
  --runs N           warm runs per timed command (default 10; medians are reported)
  --timing MODE      vgpuctl gpus slower than nvidia-smi -L: fail (default), warn,
                     or skip the timing
  --nvidia-smi PATH  nvidia-smi to time against (default: from PATH; "" none)

Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 bad usage.
EOF
}

die() {
	echo "real-host-check: $*" >&2
	exit 2
}

# ctl runs vgpuctl read-only, on the check's root, state dir and socket: it
# refuses any command that could change the host, before vgpuctl runs.
ctl() {
	local a dry=0
	for a in "$@"; do
		case $a in
		--dry-run) dry=1 ;;
		--force | --force=*) echo "real-host-check: refusing vgpuctl $*: --force is not read-only" >&2; return 126 ;;
		esac
	done
	case ${1-} in
	gpus | profiles | vgpus | --version) ;;
	carve)
		if ((!dry)); then
			echo "real-host-check: refusing vgpuctl $*: carve without --dry-run changes the host" >&2
			return 126
		fi
		;;
	*) echo "real-host-check: refusing vgpuctl $*: not a read-only command" >&2; return 126 ;;
	esac
	"$BIN/vgpuctl" --sysfs-root "$ROOT" --state-dir "$WORK/vgpuctl-state" --socket "${CTL_SOCKET:-$WORK/no-vgpud.sock}" "$@" </dev/null
}

# check records one result: PASS, FAIL, WARN or SKIP, what, and a detail.
check() {
	local status=$1 what=$2 detail=${3-}
	detail=${detail//$'\n'/ }
	detail=${detail//|/\\|}
	CHECKS+=("| $what | $status | $detail |")
	case $status in
	FAIL) ((FAILS++)) ;;
	WARN) ((WARNS++)) ;;
	esac
	echo "real-host-check: $status $what${detail:+: $detail}" >&2
}

# out appends to the report's outputs section.
out() { printf '%s\n' "$@" >>"$WORK/outputs.md"; }

# block adds a command and what it printed as a code block.
block() {
	local title=$1 file=$2
	out "" "\`$title\`:" "" '```'
	cat "$file" >>"$WORK/outputs.md"
	out '```'
}

# runctl runs ctl "$@" with stdout and stderr in $WORK/o and $WORK/e; RC is
# its exit status.
runctl() {
	ctl "$@" >"$WORK/o" 2>"$WORK/e"
	RC=$?
}

# errline is the one line a refusal or error should be (warnings aside).
errline() { grep -v -e '^$' -e 'warning:' "$WORK/e"; }

now_us() {
	if [[ -n ${EPOCHREALTIME-} ]]; then
		local t=${EPOCHREALTIME/[.,]/}
		echo "$t"
	else
		echo $(($(date +%s%N) / 1000))
	fi
}

# Timings: SAMPLES[key] holds a command's run times in µs.
declare -A SAMPLES=()
sample() { # key, command...: one timed run, appended to SAMPLES[key]
	local key=$1 t0 t1
	shift
	t0=$(now_us)
	"$@" >/dev/null 2>&1
	t1=$(now_us)
	SAMPLES[$key]+="$((t1 - t0)) "
}
median() { # key: the median of its samples, in ms with two decimals
	tr ' ' '\n' <<<"${SAMPLES[$1]}" | grep . | sort -n |
		awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f\n", m / 1000 }'
}

# gpusFromJSON reads `vgpuctl gpus -o json` (two-space indent): address,
# vendor id and device id of each GPU, one line each.
gpusFromJSON() {
	awk '
	/^      "address": "/ { a = $2; gsub(/[",]/, "", a) }
	/^      "vendorID": / { v = $2; gsub(/,/, "", v) }
	/^      "deviceID": / { d = $2; gsub(/,/, "", d); print a, v, d }' "$1"
}

# profilesFromJSON reads `vgpuctl profiles -o json`: each profile's name,
# then its model's vendor id and device ids, one line each.
profilesFromJSON() {
	awk '
	/^    "name": "/ { n = $0; sub(/^    "name": "/, "", n); sub(/",?$/, "", n) }
	/^    "model": \{/ { inModel = 1; v = ""; ids = "" }
	inModel && /^      "vendorID": / { v = $2; gsub(/,/, "", v) }
	inModel && /^      "deviceIDs": \[/ { inIDs = 1; next }
	inIDs && /^      \]/ { inIDs = 0 }
	inIDs { x = $1; gsub(/,/, "", x); ids = ids " " x }
	inModel && /^    \}/ { inModel = 0; print n, (v == "" ? "-" : v) ids }' "$1"
}

# httpGet GETs an API path from vgpud's socket into $WORK/body; prints the
# HTTP status, or nothing when no client is at hand.
httpGet() {
	local path=$1
	if command -v curl >/dev/null; then
		curl -sS --max-time 60 --unix-socket "$VGPUD_SOCKET" -o "$WORK/body" -w '%{http_code}' "http://vgpud$path" 2>>"$WORK/body.err" || true
	elif command -v python3 >/dev/null; then
		python3 - "$VGPUD_SOCKET" "$path" "$WORK/body" <<'EOF' 2>>"$WORK/body.err" || true
import http.client, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(sys.argv[1])
c = C("vgpud")
c.request("GET", sys.argv[2])
r = c.getresponse()
open(sys.argv[3], "wb").write(r.read())
print(r.status, end="")
EOF
	fi
}

stopVgpud() {
	[[ -n ${VGPUD_PID-} ]] || return 0
	local pid=$VGPUD_PID i
	VGPUD_PID=
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		VGPUD_RC=killed
		return 0
	fi
	wait "$pid" 2>/dev/null
	VGPUD_RC=$?
}

cleanup() {
	stopVgpud
	if [[ -n ${WORK-} && -d $WORK && $WORK == */vgpu-real-host-check.* ]]; then
		rm -rf -- "$WORK"
	fi
}

checkListings() {
	runctl --version
	VERSION=$(cat "$WORK/o")

	runctl gpus
	block "vgpuctl gpus" "$WORK/o"
	if ((RC != 0)); then
		check FAIL "vgpuctl gpus" "exit $RC: $(errline)"
	else
		check PASS "vgpuctl gpus" ""
	fi
	[[ -s $WORK/e ]] && block "vgpuctl gpus (stderr)" "$WORK/e"

	runctl gpus -o json
	if ((RC != 0)); then
		check FAIL "vgpuctl gpus -o json" "exit $RC: $(errline)"
	fi
	cp "$WORK/o" "$WORK/gpus.json"
	gpusFromJSON "$WORK/gpus.json" >"$WORK/gpus"
	if ((RC == 0)); then
		if [[ ! -s $WORK/gpus ]]; then
			check FAIL "vgpuctl gpus -o json" "no GPU: this check needs a host with a GPU"
		else
			check PASS "vgpuctl gpus -o json" "$(wc -l <"$WORK/gpus") GPUs"
		fi
	fi

	runctl profiles -o json
	if ((RC != 0)); then
		check FAIL "vgpuctl profiles -o json" "exit $RC: $(errline)"
	fi
	profilesFromJSON "$WORK/o" >"$WORK/catalog"
	runctl profiles
	if (($(wc -l <"$WORK/catalog") != $(grep -vc '^PROFILE ' "$WORK/o"))); then
		check FAIL "vgpuctl profiles -o json" "read $(wc -l <"$WORK/catalog") profiles of the $(grep -vc '^PROFILE ' "$WORK/o") it lists: the JSON's layout changed; mend profilesFromJSON"
	fi
}

checkGPU() {
	local addr=$1 vendor=$2 device=$3 p rc line
	local -a names=()

	runctl profiles --gpu "$addr"
	block "vgpuctl profiles --gpu $addr" "$WORK/o"
	if ((RC != 0)); then
		check FAIL "profiles --gpu $addr" "exit $RC: $(errline)"
	elif (($(grep -v -e '^PROFILE ' -e '^$' "$WORK/o" | wc -l) == 0)); then
		check FAIL "profiles --gpu $addr" "an empty table and no reason why nothing fits"
	else
		check PASS "profiles --gpu $addr" "$(grep -v -e '^PROFILE ' -e '^$' "$WORK/o" | wc -l) lines"
	fi

	# What to dry-run: the catalog's profiles of the GPU's model, those
	# profiles --gpu offers, and passthrough.
	mapfile -t names < <(
		awk -v v="$vendor" -v d="$device" '$2 == v { for (i = 3; i <= NF; i++) if ($i == d) { print $1; next } }' "$WORK/catalog"
		runctl profiles --gpu "$addr" -o json && profilesFromJSON "$WORK/o" | awk '{ print $1 }'
		echo passthrough
	)
	mapfile -t names < <(printf '%s\n' "${names[@]}" | awk 'NF && !seen[$0]++')
	out "" "\`vgpuctl carve $addr --profile P --dry-run\`:" "" '| profile | exit | says |' '|---|---:|---|'
	for p in "${names[@]}"; do
		runctl carve "$addr" --profile "$p" --dry-run
		rc=$RC
		if ((rc == 0)); then
			line=$(head -n 1 "$WORK/o")
			check PASS "carve $addr --profile $p --dry-run" "a plan"
		else
			line=$(errline)
			if [[ $p == passthrough && $rc == 2 && $line == *"unknown profile"* ]]; then
				check WARN "carve $addr --profile passthrough --dry-run" "this build has no built-in passthrough profile (issue 23, item 1)"
			elif ((rc == 2 || rc == 3)) && (($(errline | wc -l) == 1)); then
				check PASS "carve $addr --profile $p --dry-run" "refused in one line (exit $rc)"
			else
				check FAIL "carve $addr --profile $p --dry-run" "exit $rc: $line"
			fi
		fi
		line=${line//|/\\|}
		out "| $p | $rc | ${line//$'\n'/ } |"
	done
}

checkVGPUs() {
	runctl vgpus
	block "vgpuctl vgpus" "$WORK/o"
	[[ -s $WORK/e ]] && block "vgpuctl vgpus (stderr)" "$WORK/e"
	if ((RC != 0)); then
		check FAIL "vgpuctl vgpus" "exit $RC: $(errline)"
	else
		check PASS "vgpuctl vgpus" ""
	fi
	runctl vgpus -o json
	if ((RC != 0)); then
		check FAIL "vgpuctl vgpus -o json" "exit $RC: $(errline)"
	else
		check PASS "vgpuctl vgpus -o json" ""
	fi
}

checkVgpud() {
	local dir=$WORK/vgpud i status a
	mkdir -p "$dir"
	printf 'version: v1\n' >"$dir/config.yaml"
	VGPUD_SOCKET=$dir/vgpud.sock
	# Not systemd's service: it must not notify a unit this script runs in.
	env -u NOTIFY_SOCKET -u WATCHDOG_USEC -u WATCHDOG_PID "$BIN/vgpud" --config "$dir/config.yaml" --state-dir "$dir/state" --socket "$VGPUD_SOCKET" \
		--sysfs-root "$ROOT" --libvirt-uri "" </dev/null >"$dir/log" 2>&1 &
	VGPUD_PID=$!
	# vgpud listens once its first reconcile is done.
	for ((i = 0; i < 1200; i++)); do
		[[ -S $VGPUD_SOCKET ]] && break
		kill -0 "$VGPUD_PID" 2>/dev/null || break
		sleep 0.1
	done
	if [[ ! -S $VGPUD_SOCKET ]]; then
		check FAIL "vgpud with an empty config" "it did not listen within 120 s: $(tail -n 3 "$dir/log")"
		stopVgpud
		block "vgpud's log" "$dir/log"
		return
	fi
	check PASS "vgpud with an empty config" "listening"

	CTL_SOCKET=$VGPUD_SOCKET runctl vgpus
	block "vgpuctl vgpus, answered by vgpud" "$WORK/o"
	if ((RC != 0)); then
		check FAIL "vgpuctl vgpus through vgpud" "exit $RC: $(errline)"
	else
		check PASS "vgpuctl vgpus through vgpud" ""
	fi

	for a in /v1/gpus /v1/vgpus; do
		: >"$WORK/body"
		status=$(httpGet "$a")
		if [[ -z $status ]]; then
			check WARN "vgpud GET $a" "neither curl nor python3 here to ask it"
		elif [[ $status != 200 ]]; then
			check FAIL "vgpud GET $a" "HTTP $status: $(head -c 400 "$WORK/body")"
		else
			check PASS "vgpud GET $a" "HTTP 200, $(wc -c <"$WORK/body") bytes"
		fi
		if [[ $a == /v1/gpus && $status == 200 ]]; then
			while read -r addr _; do
				grep -Eq "\"address\": ?\"$addr\"" "$WORK/body" ||
					check FAIL "vgpud GET /v1/gpus" "$addr, which vgpuctl gpus lists, is missing"
			done <"$WORK/gpus"
		fi
	done

	if ! kill -0 "$VGPUD_PID" 2>/dev/null; then
		check FAIL "vgpud stays up" "it exited: $(tail -n 3 "$dir/log")"
	fi
	stopVgpud
	if [[ $VGPUD_RC == 0 ]]; then
		check PASS "vgpud stops cleanly" ""
	else
		check FAIL "vgpud stops cleanly" "exit $VGPUD_RC"
	fi
	grep -E 'level=(WARN|ERROR)' "$dir/log" >"$dir/warnings"
	[[ -s $dir/warnings ]] && block "vgpud's warnings and errors" "$dir/warnings"
}

checkTiming() {
	local i ratio nv gp
	if [[ $TIMING == skip ]]; then
		check SKIP "timing" "--timing skip"
		return
	fi
	local -a cmds=(gpus nonames profiles version)
	# One unmeasured run each, then RUNS rounds, the commands compared
	# alternating.
	for ((i = 0; i <= RUNS; i++)); do
		[[ -n $NVSMI ]] && sample nvsmi "$NVSMI" -L
		sample gpus ctl gpus
		sample nonames ctl gpus --pci-ids /dev/null
		sample profiles ctl profiles
		sample version ctl --version
		if ((i == 0)); then SAMPLES=(); fi
	done
	out "" "Medians of $RUNS warm runs, in ms (one unmeasured run each first; the commands alternate):" "" \
		'| command | median ms |' '|---|---:|'
	[[ -n $NVSMI ]] && out "| \`nvidia-smi -L\` | $(median nvsmi) |"
	out "| \`vgpuctl gpus\` | $(median gpus) |" \
		"| \`vgpuctl gpus --pci-ids /dev/null\` | $(median nonames) |" \
		"| \`vgpuctl profiles\` | $(median profiles) |" \
		"| \`vgpuctl --version\` | $(median version) |"
	if [[ -z $NVSMI ]]; then
		check SKIP "vgpuctl gpus <= 1.0x nvidia-smi -L" "no nvidia-smi"
		return
	fi
	nv=$(median nvsmi)
	gp=$(median gpus)
	ratio=$(awk -v a="$gp" -v b="$nv" 'BEGIN { printf "%.2f", a / b }')
	out "" "vgpuctl gpus / nvidia-smi -L: **${ratio}x**"
	if awk -v r="$ratio" 'BEGIN { exit !(r <= 1.0) }'; then
		check PASS "vgpuctl gpus <= 1.0x nvidia-smi -L" "${ratio}x ($gp ms against $nv ms)"
	elif [[ $TIMING == warn ]]; then
		check WARN "vgpuctl gpus <= 1.0x nvidia-smi -L" "${ratio}x ($gp ms against $nv ms)"
	else
		check FAIL "vgpuctl gpus <= 1.0x nvidia-smi -L" "${ratio}x ($gp ms against $nv ms)"
	fi
}

hostFacts() {
	local f
	echo "- Date (UTC): $(date -u '+%Y-%m-%d %H:%M')"
	echo "- Kernel: $(uname -r); $(nproc 2>/dev/null || echo '?') CPUs; run as uid $(id -u)"
	[[ $ROOT != / ]] && echo "- Root: $ROOT (--sysfs-root: not a real host)"
	f=$ROOT/sys/module/nvidia/version
	[[ -r $f ]] && echo "- NVIDIA module: $(cat "$f")"
	if [[ -n $NVSMI ]]; then
		echo "- nvidia-smi -L:"
		"$NVSMI" -L 2>&1 | sed -e 's/ (UUID: [^)]*)//' -e 's/^/    /'
	fi
	echo "- vgpuctl: ${VERSION:-?}; vgpu-nvml beside it: $([[ -x $BIN/vgpu-nvml ]] && echo yes || echo no)"
}

main() {
	BIN=${VGPU_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin}
	ROOT=/
	RUNS=10
	TIMING=fail
	NVSMI=$(command -v nvidia-smi || true)
	while (($#)); do
		case $1 in
		--bin) BIN=${2?--bin needs a directory}; shift ;;
		--sysfs-root) ROOT=${2?--sysfs-root needs a directory}; shift ;;
		--runs) RUNS=${2?--runs needs a count}; shift ;;
		--timing) TIMING=${2?--timing needs fail, warn or skip}; shift ;;
		--nvidia-smi) NVSMI=${2?--nvidia-smi needs a path}; shift ;;
		-h | --help) usage; exit 0 ;;
		*) usage >&2; die "unknown argument $1" ;;
		esac
		shift
	done
	[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs $RUNS: want a count of 1 or more"
	[[ $TIMING == fail || $TIMING == warn || $TIMING == skip ]] || die "--timing $TIMING: want fail, warn or skip"
	[[ -x $BIN/vgpuctl && -x $BIN/vgpud ]] || die "no vgpuctl and vgpud in $BIN: build them (make build) or name their directory with --bin"
	[[ -d $ROOT/sys ]] || die "--sysfs-root $ROOT has no sys/"
	if [[ -n $NVSMI && ! -x $NVSMI ]]; then die "--nvidia-smi $NVSMI is not executable"; fi

	WORK=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-real-host-check.XXXXXX") || die "cannot make a temp dir"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	CHECKS=()
	VGPUD_PID=
	VGPUD_RC=
	FAILS=0
	WARNS=0
	: >"$WORK/outputs.md"

	checkListings
	while read -r addr vendor device; do
		checkGPU "$addr" "$vendor" "$device"
	done <"$WORK/gpus"
	checkVGPUs
	checkVgpud
	checkTiming

	echo "### $(date -u '+%Y-%m-%d'): $(cut -d' ' -f1 "$WORK/gpus" | paste -sd, -) — $VERSION"
	echo
	hostFacts
	echo
	echo "Result: $((${#CHECKS[@]})) checks, $FAILS failed, $WARNS warnings (scripts/real-host-check.sh)."
	echo
	echo "| check | result | detail |"
	echo "|---|---|---|"
	printf '%s\n' "${CHECKS[@]}"
	cat "$WORK/outputs.md"
	((FAILS == 0))
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	main "$@"
fi
