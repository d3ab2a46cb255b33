package engine

import (
	"context"
	"net/http"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// Operations timed and counted in metrics.
const (
	opCarve     = "carve"
	opUncarve   = "uncarve"
	opReconcile = "reconcile"
	opAllocate  = "allocate" // reserve
	opPrepare   = "prepare"
	opRelease   = "release"
	opUnreserve = "unreserve"
	opLease     = "lease"
	opSwap      = "mdev-swap"
	opRepair    = "repair"
)

// Recorder takes vgpud's measurements: the engine's operations and
// reconciles and the API's requests. vgpud's is Prometheus
// (pkg/daemon/metrics). Without one, as vgpuctl runs the engine in process,
// nothing is recorded: the Prometheus client stays out of the commands,
// whose start would pay for its package set-up.
type Recorder interface {
	// Operation: op took d and failed when err is not nil.
	Operation(op string, d time.Duration, err error)
	// GPUChange counts one GPU a reconcile "changed", "refused" or "failed" on.
	GPUChange(outcome string)
	// Reconciled: the drift of the reconcile that finished at.
	Reconciled(drift int, at time.Time)
	// Request: one API request by route pattern, method label
	// (methodLabel) and status.
	Request(route, method string, status int, d time.Duration)
	// Watch gives the recorder the engine's vGPU listing, read at scrape time.
	Watch(vgpus func(context.Context) ([]api.VGPU, error))
	// Handler serves the metrics page.
	Handler() http.Handler
}

// noRecorder records nothing and serves no page.
type noRecorder struct{}

func (noRecorder) Operation(string, time.Duration, error)          {}
func (noRecorder) GPUChange(string)                                {}
func (noRecorder) Reconciled(int, time.Time)                       {}
func (noRecorder) Request(string, string, int, time.Duration)      {}
func (noRecorder) Watch(func(context.Context) ([]api.VGPU, error)) {}
func (noRecorder) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "this vgpud keeps no metrics", http.StatusNotFound)
	})
}

// observe records one operation that took since start and ended with err.
func observe(r Recorder, op string, start time.Time, err error) {
	r.Operation(op, time.Since(start), err)
}
