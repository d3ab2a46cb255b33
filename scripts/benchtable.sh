#!/usr/bin/env bash
# Turns `go test -bench` output into a table: benchmark, ns/op, B/op, allocs/op.
set -euo pipefail
awk '
/^pkg:/ { pkg=$2; sub(".*/vgpu/", "", pkg) }
/^Benchmark/ {
	name=$1; sub(/-[0-9]+$/, "", name)
	ns=""; b=""; al=""; extra=""
	for (i=3; i<=NF; i+=2) {
		if ($(i+1)=="ns/op") ns=$i
		else if ($(i+1)=="B/op") b=$i
		else if ($(i+1)=="allocs/op") al=$i
		else extra=extra $i " " $(i+1) " "
	}
	printf "| %-28s | %-44s | %12s | %8s | %9s | %s\n", pkg, name, ns, b, al, extra
	n++
}
/^(FAIL|--- FAIL|panic:)/ { print > "/dev/stderr"; failed = 1 }
BEGIN { printf "| %-28s | %-44s | %12s | %8s | %9s | %s\n", "package", "benchmark", "ns/op", "B/op", "allocs/op", "other"; print "|---|---|---:|---:|---:|---|" }
END { if (n == 0) { print "no benchmarks ran" > "/dev/stderr"; exit 1 }; if (failed) exit 1 }
'
