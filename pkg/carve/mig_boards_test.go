//go:build cgo

package carve_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// migBoard is a board with MIG-backed profiles. The H100's and A30's the
// catalog gives by name only: their ids come from NVML's supported types
// (Carver.Enrich).
type migBoard struct {
	name, model, nvModel string
	steps                []migStep // the first is the fresh carve
}

type migStep struct {
	prof      string
	profileID int // GPU instance profile id
	n         int
}

func migBoards() []migBoard {
	return []migBoard{
		{"A100 PCIe 40GB", simkernel.ModelA100VF, simnvml.ModelA100PCIe40GB, []migStep{
			{"a100-1-5c", 19, 7}, {"a100-2-10c", 14, 3}, {"a100-7-40c", 0, 1}, {"a100-3-20c", 9, 2},
		}},
		{"H100 PCIe 80GB", simkernel.ModelH100VF, simnvml.ModelH100PCIe80GB, []migStep{
			{"h100-1-10c", 19, 7}, {"h100-2-20c", 14, 3}, {"h100-1-20c", 15, 4}, {"h100-7-80c", 0, 1}, {"h100-3-40c", 9, 2},
		}},
		{"A30", simkernel.ModelA30VF, simnvml.ModelA30PCIe24GB, []migStep{
			{"a30-1-6c", 14, 4}, {"a30-2-12c", 5, 2}, {"a30-4-24c", 0, 1}, {"a30-1-6c", 14, 4},
		}},
	}
}

// TestMIGBoardsCarve: on each board a fresh GPU becomes the first
// profile's vGPUs (on the H100 and the A30 with the ids NVML names); the
// same carve again changes nothing; each re-split swaps the instances
// without sriov-manage; an uncarve leaves no instance and no VF.
func TestMIGBoardsCarve(t *testing.T) {
	ctx := context.Background()
	for _, b := range migBoards() {
		t.Run(b.name, func(t *testing.T) {
			m := newMIGRigOn(t, b.model, b.nvModel)
			for i, st := range b.steps {
				from := len(m.rec.Writes())
				m.mustDo(t, st.prof)
				if n := toolRuns(m.rec.Writes()[from:]); i > 0 && n != 0 {
					t.Fatalf("re-split to %s ran sriov-manage %d times", st.prof, n)
				}
				checkCarried(t, m.rig, st.prof)
				if n := m.instances(t, st.profileID); n != st.n {
					t.Fatalf("%s: %d instances, want %d", st.prof, n, st.n)
				}
				if i == 0 {
					m.checkSettled(t, "second carve", st.prof)
				}
			}
			if n := m.nv.Sessions(); n != 0 {
				t.Fatalf("%d NVML sessions left open", n)
			}
			if res, err := m.do(ctx, "", carve.Options{}); err != nil {
				t.Fatalf("uncarve: %v\nplan:\n%s", err, res.Plan)
			}
			checkCarried(t, m.rig, "")
			if n := m.instances(t, -1); n != 0 {
				t.Fatalf("uncarve left %d instances", n)
			}
		})
	}
}

// TestMIGBoardsBootReapply: after a reboot (no VFs, no instances, MIG off)
// vgpud's carve rebuilds the same vGPUs, MIG mode first.
func TestMIGBoardsBootReapply(t *testing.T) {
	for _, b := range migBoards() {
		t.Run(b.name, func(t *testing.T) {
			st := b.steps[1]
			m := newMIGRigOn(t, b.model, b.nvModel) // the rebooted host
			res := m.mustDo(t, st.prof)
			if res.Plan.Ops[0].Kind != carve.OpMIGMode {
				t.Fatalf("plan does not start with MIG mode:\n%s", res.Plan)
			}
			checkCarried(t, m.rig, st.prof)
			if n := m.instances(t, st.profileID); n != st.n {
				t.Fatalf("%d instances, want %d", n, st.n)
			}
		})
	}
}

// TestMIGInUse: a VF a VM holds blocks the re-split and the uncarve that
// would destroy it (unless forced), host unchanged; an instance used
// outside vgpu fails the re-split at its destroy, undone.
func TestMIGInUse(t *testing.T) {
	ctx := context.Background()
	for _, b := range migBoards() {
		first, other := b.steps[0], b.steps[1]
		t.Run(b.name+" VF held by a VM", func(t *testing.T) {
			m := newMIGRigOn(t, b.model, b.nvModel)
			m.mustDo(t, first.prof)
			vf := m.gpuNow(t).SRIOV.VFs[1]
			h := hold(t, m.k, pci.GroupDevicePath(vf.IOMMUGroup))
			before := m.state(t)
			for _, change := range []string{"", other.prof} {
				_, err := m.do(ctx, change, carve.Options{})
				checkBlockedBy(t, fmt.Sprintf("change to %q", change), err, vf.Address.String())
				checkUnchanged(t, "refused change", before, m.state(t))
			}
			h.Close()
			m.mustDo(t, other.prof)
			checkCarried(t, m.rig, other.prof)
		})
		t.Run(b.name+" instance used outside vgpu", func(t *testing.T) {
			m := newMIGRigOn(t, b.model, b.nvModel)
			m.mustDo(t, other.prof)
			ins := m.nv.Instances(migAddr.String())
			if err := m.nv.SetInstanceInUse(migAddr.String(), ins[len(ins)-1].ID, true); err != nil {
				t.Fatal(err)
			}
			before := m.state(t)
			_, err := m.do(ctx, first.prof, carve.Options{})
			if !errors.Is(err, nvstate.ErrInUse) || errors.Is(err, carve.ErrUndo) || !strings.Contains(err.Error(), "undone") {
				t.Fatalf("err = %v, want ErrInUse, undone", err)
			}
			checkUnchanged(t, "the failed re-split", before, m.state(t))
		})
	}
}
