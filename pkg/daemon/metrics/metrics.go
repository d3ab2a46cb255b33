package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// Metrics are vgpud's Prometheus metrics: served on the config's
// metrics.listen and on the API socket.
type Metrics struct {
	reg       *prometheus.Registry
	log       *slog.Logger
	latency   *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	requests  *prometheus.HistogramVec
	drift     prometheus.Gauge
	reconcile prometheus.Gauge
	changes   *prometheus.CounterVec
}

// New registers the metrics in a new registry; log takes scrape errors
// (nil: discarded).
func New(log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		log: log,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vgpu_operation_duration_seconds",
			Help:    "Duration of vgpud operations (carve, uncarve, reconcile, allocate, prepare, release, unreserve, lease, mdev-swap, repair).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpu_operation_errors_total",
			Help: "vgpud operations that failed, by operation.",
		}, []string{"operation"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vgpu_api_request_duration_seconds",
			Help:    "API requests by route, method and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method", "code"}),
		drift: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vgpu_reconcile_drift",
			Help: "GPUs not as the host config wants after the last reconcile (refused or failed).",
		}),
		reconcile: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vgpu_reconcile_last_timestamp_seconds",
			Help: "When the last reconcile finished (Unix time).",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vgpu_reconcile_gpu_changes_total",
			Help: "GPUs a reconcile changed, refused (in use) or failed on.",
		}, []string{"outcome"}),
	}
	m.reg.MustRegister(m.latency, m.errors, m.requests, m.drift, m.reconcile, m.changes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics live, for tests and embedding.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Operation records one operation.
func (m *Metrics) Operation(op string, d time.Duration, err error) {
	m.latency.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

// GPUChange counts one GPU a reconcile changed, refused or failed on.
func (m *Metrics) GPUChange(outcome string) { m.changes.WithLabelValues(outcome).Inc() }

// Reconciled sets the drift and time of the last reconcile.
func (m *Metrics) Reconciled(drift int, at time.Time) {
	m.drift.Set(float64(drift))
	m.reconcile.Set(float64(at.Unix()))
}

// Request records one API request.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Observe(d.Seconds())
}

// Watch adds the collector that counts the vGPUs list returns, at scrape
// time.
func (m *Metrics) Watch(list func(context.Context) ([]api.VGPU, error)) {
	m.reg.MustRegister(&vgpuCollector{list: list, log: m.log,
		vgpus: prometheus.NewDesc("vgpu_vgpus", "vGPUs by GPU, profile and state (free, allocated, leased).",
			[]string{"gpu", "profile", "state"}, nil),
		total: prometheus.NewDesc("vgpu_vgpus_total", "vGPUs carved, by GPU and profile.",
			[]string{"gpu", "profile"}, nil),
	})
}

// vgpuCollector counts the host's vGPUs at scrape time (vgpud: from the
// engine's cached view and the ledger), so the numbers are never stale by more than
// the view's TTL.
type vgpuCollector struct {
	list         func(context.Context) ([]api.VGPU, error)
	log          *slog.Logger
	vgpus, total *prometheus.Desc
}

func (c *vgpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.vgpus
	ch <- c.total
}

func (c *vgpuCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := c.list(ctx)
	if err != nil {
		c.log.Warn("metrics: cannot list vGPUs", "err", err)
		return
	}
	type key struct{ gpu, profile string }
	count := map[key]map[string]int{}
	for _, v := range vs {
		k := key{v.GPU, v.Profile}
		if count[k] == nil {
			count[k] = map[string]int{"free": 0, "allocated": 0, "leased": 0}
		}
		switch v.State {
		case "free":
			count[k]["free"]++
		case "leased":
			count[k]["leased"]++
		default:
			count[k]["allocated"]++
		}
	}
	for k, states := range count {
		total := 0
		for st, n := range states {
			total += n
			ch <- prometheus.MustNewConstMetric(c.vgpus, prometheus.GaugeValue, float64(n), k.gpu, k.profile, st)
		}
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(total), k.gpu, k.profile)
	}
}
