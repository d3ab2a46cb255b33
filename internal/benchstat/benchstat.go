// Package benchstat reports a benchmark's latency quantiles, as the table
// of make bench (scripts/benchtable.sh) prints them.
package benchstat

import (
	"slices"
	"testing"
	"time"
)

// Quantiles adds the median and p99 of ds, in milliseconds, as
// prefix+"median-ms" and prefix+"p99-ms". It sorts ds.
func Quantiles(b *testing.B, ds []time.Duration, prefix string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), prefix+"median-ms")
	b.ReportMetric(q(0.99), prefix+"p99-ms")
}
