package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// Start repairs what a crash left and reconciles: what vgpud does once at
// start, and vgpuctl apply in process. In order:
//
//  1. open intents are logged; an mdev swap is rolled forward in the ledger
//     (swap.go), a destroying release is finished (its mdevs removed,
//     their allocations deleted) and a pod claim the kubelet never had an
//     answer for is freed (pods.go); carves, uncarves and prepare binds are
//     left to the reconcile, since carve ops are idempotent and plan from
//     live state, and end once it ran; a PF's VF driver autoprobe that a
//     carve turned and did not put back is put back by the reconcile,
//     first, as every reconcile does;
//  2. allocations still "releasing" without an intent are finished too;
//  3. attached allocations of domains whose vGPU no VFIO user holds go
//     back to reserved: their VM is not running (a host crash or reboot
//     ended it without a release hook) and the domain keeps them;
//  4. the reconcile, which also brings back allocated mdevs that are missing.
func (e *Engine) Start(ctx context.Context) api.ReconcileReport {
	e.host.Lock()
	defer e.host.Unlock()
	start := time.Now()
	repaired, pending, err := e.repair(ctx)
	observe(e.metrics, opRepair, start, err)
	rep := e.reconcileLocked(ctx, e.Config(), ReasonStart, nil)
	for _, in := range pending {
		if err := e.ledger.EndIntent(in.ID); err != nil {
			e.log.Error("end repaired intent", "intent", in.String(), "err", err)
			continue
		}
		repaired = append(repaired, fmt.Sprintf("%s: resolved by the reconcile", in))
	}
	rep.Repaired = append(repaired, rep.Repaired...)
	if err != nil {
		rep.Error = joinError(rep.Error, "repair: "+err.Error())
	}
	return rep
}

// joinError is a report's error with msg after it.
func joinError(err, msg string) string {
	if err == "" {
		return msg
	}
	return err + "; " + msg
}

func (e *Engine) repair(ctx context.Context) (done []string, pending []ledger.Intent, err error) {
	intents, err := e.ledger.OpenIntents()
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, in := range intents {
		e.log.Warn("open intent found: a change was interrupted (crash or kill)", "intent", in.String())
		var msg string
		var err error
		switch in.Kind {
		case ledger.IntentMdevSwap:
			msg, err = e.repairSwap(in)
		case ledger.IntentRelease:
			msg, err = e.repairRelease(ctx, in)
		case ledger.IntentPodClaim:
			msg, err = e.repairPodClaim(ctx, in)
		case ledger.IntentAutoprobe:
			continue // the reconcile puts it back first (repairAutoprobe)
		default:
			pending = append(pending, in)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			e.log.Error("repair failed", "intent", in.String(), "err", err)
			continue
		}
		e.log.Info("repaired", "what", msg)
		done = append(done, msg)
	}
	// Releasing allocations without an intent: finish them the same way.
	allocs, err := e.ledger.Allocations()
	if err != nil {
		return done, pending, errors.Join(append(errs, err)...)
	}
	for _, a := range allocs {
		if a.State != ledger.StateReleasing {
			continue
		}
		if err := e.finishReleasing(ctx, a); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, fmt.Sprintf("allocation of %s to %s was being released: finished", a.VGPU, a.DomainName))
	}
	demoted, err := e.demoteStopped(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	done = append(done, demoted...)
	return done, pending, errors.Join(errs...)
}

// repairRelease finishes a destroying release: every mdev still releasing
// is removed and its allocation deleted.
func (e *Engine) repairRelease(ctx context.Context, in ledger.Intent) (string, error) {
	var ri releaseIntent
	if err := json.Unmarshal(in.Data, &ri); err != nil {
		return "", fmt.Errorf("repair intent %s: decode its data: %w", in, err)
	}
	for _, u := range ri.Mdevs {
		a, ok, err := e.ledger.Allocation(u)
		if err != nil {
			return "", err
		}
		if ok && a.State == ledger.StateReleasing {
			if err := e.finishReleasing(ctx, a); err != nil {
				return "", err
			}
		}
	}
	if err := e.ledger.EndIntent(in.ID); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: finished, mdevs of %s removed", in, ri.DomainName), nil
}

// finishReleasing removes a releasing allocation's mdev if it is there and
// deletes the allocation. Its VM has stopped: that is what releasing says.
func (e *Engine) finishReleasing(ctx context.Context, a ledger.Allocation) error {
	if isUUID(a.VGPU) {
		if err := e.removeMdev(ctx, a.VGPU); err != nil {
			return fmt.Errorf("finish the release of mdev %s of domain %s: %w", a.VGPU, a.DomainName, err)
		}
	}
	return e.ledger.Update(func(tx *ledger.Tx) error {
		_, _, err := tx.DeleteAllocation(a.VGPU)
		return err
	})
}

// demoteStopped moves attached allocations back to reserved when no VFIO
// user holds their vGPU.
func (e *Engine) demoteStopped(ctx context.Context) ([]string, error) {
	allocs, err := e.ledger.Allocations()
	if err != nil {
		return nil, err
	}
	var out []string
	usage := carve.VFIOUsage{FS: e.fs}.Snapshot()
	for _, a := range allocs {
		// A pod's vGPU is attached from the kubelet's allocation on, VM
		// running or not: the kubelet's PodResources says when it goes.
		if a.State != ledger.StateAttached || a.Pod != nil {
			continue
		}
		_, in, err := usage.Holder(ctx, a.VGPU)
		if err != nil {
			e.log.Warn("cannot tell whether an attached vGPU is in use; leaving it attached", "vgpu", a.VGPU, "err", err)
			continue
		}
		if in {
			continue
		}
		if _, err := e.ledger.SetState(a.VGPU, ledger.StateReserved); err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("%s of %s was attached but its VM is not running: reserved", a.VGPU, a.DomainName))
	}
	return out, nil
}

// repairAutoprobe puts back the VF driver autoprobe that changes cut short
// (a crash of vgpud or vgpuctl) left turned, as the ledger recorded it,
// before a reconcile plans: what it put back goes in rep.Repaired. A GPU a
// manual change holds is left to that change.
func (e *Engine) repairAutoprobe(ctx context.Context, rep *api.ReconcileReport) error {
	done, err := e.carver.RepairAutoprobe(ctx)
	rep.Repaired = append(rep.Repaired, done...)
	if err != nil {
		e.log.Error("repair of VF driver autoprobe failed; the next reconcile tries again", "err", err)
	}
	return err
}
