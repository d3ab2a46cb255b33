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
	b.ReportMetric(Ms(at(ds, 0.5)), prefix+"median-ms")
	b.ReportMetric(Ms(at(ds, 0.99)), prefix+"p99-ms")
}

// Quantile is the p-quantile of ds (0 <= p <= 1), the sample of rank
// p*(len(ds)-1) in sorted order, as Quantiles reports it; 0 when ds is
// empty. It leaves ds as it is.
func Quantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return at(s, p)
}

// Ms is d in milliseconds, the unit of the reported latencies.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// at is the p-quantile of sorted.
func at(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}
