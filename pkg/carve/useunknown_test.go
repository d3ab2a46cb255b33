package carve_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// procReads counts what a caller reads under /proc.
type procReads struct {
	sysfs.FS
	mu sync.Mutex
	n  int
}

func (p *procReads) count(name string) {
	if strings.HasPrefix(name, sysfs.Proc) {
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}
}

func (p *procReads) ReadDir(name string) ([]fs.DirEntry, error) {
	p.count(name)
	return p.FS.ReadDir(name)
}

func (p *procReads) Readlink(name string) (string, error) {
	p.count(name)
	return p.FS.Readlink(name)
}

func (p *procReads) ReadFile(name string) ([]byte, error) {
	p.count(name)
	return p.FS.ReadFile(name)
}

func (p *procReads) reads() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// A process whose open files cannot be read (no CAP_SYS_PTRACE) may hold
// any vGPU: a listing still answers, each vGPU nobody visible holds is of
// unknown use and the warning names the process and the capability; a
// change that would destroy such a vGPU is refused and changes nothing,
// unless forced.
func TestUseUnknown(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "mi25")
	r.mustDo(t, "mi25-4g")
	g := r.gpuNow(t)
	hidden := simkernel.Opener{PID: 4321, Comm: "qemu-system-x86"}
	h, err := r.k.OpenAs(hidden, pci.GroupDevicePath(g.SRIOV.VFs[2].IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := r.k.OpenAs(hidden, "/dev/vfio/vfio")
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	r.k.SetFDsUnreadable(hidden.PID, true)
	seen, err := r.k.OpenAs(simkernel.Opener{PID: 4400, Comm: "qemu-visible"}, pci.GroupDevicePath(g.SRIOV.VFs[0].IOMMUGroup))
	if err != nil {
		t.Fatal(err)
	}

	usage := carve.VFIOUsage{FS: r.k}.Snapshot()
	vs, err := carve.VGPUs(ctx, r.k, []inventory.GPU{g}, r.cat, usage)
	if err != nil {
		t.Fatalf("listing with an unreadable process: %v", err)
	}
	for _, v := range vs {
		visible := v.ID == g.SRIOV.VFs[0].Address.String()
		if v.InUse != visible || v.UseUnknown == visible {
			t.Errorf("%s: in use %v, unknown %v; want the visibly held one in use and the rest unknown", v.ID, v.InUse, v.UseUnknown)
		}
	}
	w := usage.Warning()
	if !strings.Contains(w, "qemu-system-x86 (pid 4321)") || !strings.Contains(w, "CAP_SYS_PTRACE") {
		t.Fatalf("warning %q does not name the process and CAP_SYS_PTRACE", w)
	}

	if err := seen.Close(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, r.k)
	for _, change := range []string{"", "mi25-2g"} {
		_, err := r.do(ctx, change, carve.Options{})
		var iu *carve.InUseError
		if !errors.As(err, &iu) || !errors.Is(err, carve.ErrInUse) {
			t.Fatalf("change to %q: %v, want refused", change, err)
		}
		if len(iu.Blocked) != 4 || !iu.Blocked[0].Unknown {
			t.Fatalf("blocked = %+v, want the 4 VFs of unknown use", iu.Blocked)
		}
		if msg := err.Error(); !strings.Contains(msg, "use cannot be told") || !strings.Contains(msg, "CAP_SYS_PTRACE") ||
			strings.Count(msg, "CAP_SYS_PTRACE") != 1 {
			t.Fatalf("refusal %q: want the unknown-use VFs and the capability named once", msg)
		}
		checkUnchanged(t, "refused change", before, snapshot(t, r.k))
	}
	dry, err := r.do(ctx, "", carve.Options{DryRun: true})
	if err != nil || len(dry.Plan.Blocked) != 4 {
		t.Fatalf("dry run: %v, blocked %+v", err, dry.Plan.Blocked)
	}

	// The hidden process lets go of the VF but still runs: the use stays
	// unknown, and --force goes through.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.do(ctx, "", carve.Options{}); !errors.Is(err, carve.ErrInUse) {
		t.Fatalf("uncarve while the use is unknown: %v, want refused", err)
	}
	if _, err := r.do(ctx, "", carve.Options{Force: true}); err != nil {
		t.Fatalf("forced uncarve: %v", err)
	}
	if n := r.gpuNow(t).SRIOV.NumVFs; n != 0 {
		t.Fatalf("%d VFs after forced uncarve", n)
	}
}

// Where no vGPU exists, nothing reads /proc: neither a listing nor a carve
// that destroys nothing.
func TestNoVGPUNoProcScan(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "mi25")
	pr := &procReads{FS: r.k}
	g, err := inventory.Get(pr, nil, r.gpu)
	if err != nil {
		t.Fatal(err)
	}
	usage := carve.VFIOUsage{FS: pr}.Snapshot()
	if vs, err := carve.VGPUs(ctx, pr, []inventory.GPU{g}, r.cat, usage); err != nil || len(vs) != 0 {
		t.Fatalf("listing an uncarved GPU: %v, %v", vs, err)
	}
	if n := pr.reads(); n != 0 {
		t.Fatalf("the listing read /proc %d times with no vGPU", n)
	}
	c := carve.New(pr, r.cat, carve.NewFileDriverStore(filepath.Join(t.TempDir(), "drivers.json")))
	if _, err := c.Carve(ctx, vgpu.GPU(r.gpu), "mi25-4g", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	if n := pr.reads(); n != 0 {
		t.Fatalf("a carve that destroys nothing read /proc %d times", n)
	}
	if _, err := c.Uncarve(ctx, vgpu.GPU(r.gpu), carve.Options{}); err != nil {
		t.Fatal(err)
	}
	if pr.reads() == 0 {
		t.Fatal("an uncarve of 4 VFs never looked at /proc: the counter counts nothing")
	}
}
