package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vgpu-project/vgpu/internal/durable"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/config"
)

// The state directory, vgpud's and vgpuctl's alike.
const (
	DefaultStateDir = "/var/lib/vgpud"
	LedgerFile      = "ledger.db"
	LocksDir        = "locks"
)

// ErrConfig: the host config or the profile catalog is unusable (vgpud
// exits 2).
var ErrConfig = errors.New("bad configuration")

// Fits checks cfg against the host's GPUs and the catalog: every entry
// resolves (config.Desired, config.DesiredParents), and no parent it
// manages is one mdevctl starts mdevs on. bad says why cfg does not fit;
// err, that the host could not be read.
func (e *Engine) Fits(ctx context.Context, cfg *config.Config) (bad, err error) {
	v, err := e.currentView(ctx, true)
	if err != nil {
		return nil, err
	}
	as, err := cfg.Desired(v.gpus, e.catalog)
	if err != nil {
		return err, nil
	}
	if _, err = cfg.DesiredParents(e.catalog); err != nil {
		return err, nil
	}
	return checkMdevctl(e.fs, e.mdevctlDir, cfg, as, nil), nil
}

// PlanReport turns an assert into the report of a dry-run apply.
func PlanReport(a api.AssertReport, reason string) api.ReconcileReport {
	rep := api.ReconcileReport{Reason: reason + " (dry run)", Config: a.Config, Started: time.Now().UTC(), GPUs: []api.GPUReport{}, Error: a.Error}
	for _, dr := range a.GPUs {
		r := api.GPUReport{GPU: dr.GPU, Profile: dr.Desired, Action: "carve", Ops: dr.Ops, Refused: dr.Blocked, Error: dr.Error}
		if dr.Desired == "" {
			r.Action = "uncarve"
		}
		rep.GPUs = append(rep.GPUs, r)
	}
	return rep
}

// WriteConfig replaces the config file atomically and durably
// (durable.WriteFile), creating its directory.
func WriteConfig(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write host config %s: create %s: %w", path, dir, err)
	}
	if err := durable.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write host config %s: %w", path, err)
	}
	return nil
}
