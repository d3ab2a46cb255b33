// Package metrics is vgpud's engine.Recorder in Prometheus: operation
// latencies and errors, reconcile drift, API requests and vGPU counts, in
// their own registry (no globals). Only vgpud links it.
package metrics
