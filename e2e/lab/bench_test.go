//go:build e2e

package lab

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
)

// BenchmarkLab boots the lab once and runs the guest's TestLabBench: vgpu
// side by side with a bare shell loop and Debian's mdevctl doing the same
// writes on the real kernel, and virsh start + destroy of a vGPU domain
// through the hook against one prepared by hand, 7 runs each. Each
// row/tool reports its median (ns/op) and min-ms/max-ms; x-shell,
// x-mdevctl and x-by_hand are its median over theirs. Run by make bench
// (docs/benchmarks.md); minutes under TCG.
func BenchmarkLab(b *testing.B) {
	share := newShare(b)
	boot := bootShare(b, share, "VGPU_LAB_BENCH=1 guest.test -test.v -test.timeout 20m -test.run '^TestLabBench$'")
	if boot.status != 0 {
		b.Fatalf("the guest's TestLabBench failed (exit %d):\n%s", boot.status, tail(boot.log, 40))
	}
	f, err := os.Open(filepath.Join(share, "out", "bench.txt"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	type key struct{ row, tool string }
	runs := map[key][]time.Duration{}
	var order []key
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue
		}
		ns, err := strconv.ParseInt(fs[len(fs)-1], 10, 64)
		if err != nil {
			b.Fatalf("bench.txt: %q: %v", sc.Text(), err)
		}
		k := key{fs[0], strings.Join(fs[1:len(fs)-1], " ")}
		if _, seen := runs[k]; !seen {
			order = append(order, k)
		}
		runs[k] = append(runs[k], time.Duration(ns))
	}
	median := func(k key) time.Duration { return benchstat.Quantile(runs[k], 0.5) }
	for _, k := range order {
		b.Run(k.row+"/"+strings.ReplaceAll(k.tool, " ", "_"), func(b *testing.B) {
			ds := slices.Clone(runs[k])
			slices.Sort(ds)
			m := median(k)
			b.ReportMetric(float64(m.Nanoseconds()), "ns/op")
			b.ReportMetric(float64(ds[0].Microseconds())/1000, "min-ms")
			b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "max-ms")
			b.ReportMetric(float64(len(ds)), "runs")
			if !strings.HasPrefix(k.tool, "vgpu") && k.tool != "go hello" {
				return
			}
			base := map[string]string{"noop": "vgpuctl --version", "hook": "by hand"}[k.row]
			if base == "" {
				base = "shell"
			}
			if _, ok := runs[key{k.row, base}]; ok && k.tool != base {
				b.ReportMetric(float64(m)/float64(median(key{k.row, base})), "x-"+strings.ReplaceAll(base, " ", "_"))
			}
			if _, ok := runs[key{k.row, "mdevctl"}]; ok {
				b.ReportMetric(float64(m)/float64(median(key{k.row, "mdevctl"})), "x-mdevctl")
			}
		})
	}
	fmt.Fprintln(os.Stderr, "lab benchmark: medians of", len(runs[order[0]]), "runs each")
}
