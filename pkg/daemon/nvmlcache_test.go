//go:build cgo

package daemon

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// countingMIG counts every call to NVML.
type countingMIG struct {
	nvstate.Manager
	calls atomic.Int64
}

func (m *countingMIG) Mode(a pci.Address) (nvstate.Mode, error) {
	m.calls.Add(1)
	return m.Manager.Mode(a)
}

func (m *countingMIG) SetMode(a pci.Address, on bool) error {
	m.calls.Add(1)
	return m.Manager.SetMode(a, on)
}

func (m *countingMIG) Instances(a pci.Address) ([]nvstate.Instance, error) {
	m.calls.Add(1)
	return m.Manager.Instances(a)
}

func (m *countingMIG) Create(a pci.Address, id int, start *int) (nvstate.Instance, error) {
	m.calls.Add(1)
	return m.Manager.Create(a, id, start)
}

func (m *countingMIG) Destroy(a pci.Address, id int) error {
	m.calls.Add(1)
	return m.Manager.Destroy(a, id)
}

func (m *countingMIG) Sizes(a pci.Address) (nvstate.Sizes, error) {
	m.calls.Add(1)
	return m.Manager.Sizes(a)
}

func (m *countingMIG) Virtualization(a pci.Address) (nvstate.Virt, error) {
	m.calls.Add(1)
	return m.Manager.Virtualization(a)
}

func (m *countingMIG) VGPUTypes(a pci.Address) ([]nvstate.VGPUType, error) {
	m.calls.Add(1)
	return m.Manager.VGPUTypes(a)
}

func (m *countingMIG) Scheduler(a pci.Address) (nvstate.Sched, error) {
	m.calls.Add(1)
	return m.Manager.Scheduler(a)
}

func (m *countingMIG) SetScheduler(a pci.Address, s nvstate.Sched) error {
	m.calls.Add(1)
	return m.Manager.SetScheduler(a, s)
}

func (m *countingMIG) MixedSize(a pci.Address) (bool, error) {
	m.calls.Add(1)
	return m.Manager.MixedSize(a)
}

func (m *countingMIG) SetMixedSize(a pci.Address, on bool) error {
	m.calls.Add(1)
	return m.Manager.SetMixedSize(a, on)
}

// TestListingsNeverAskNVML: vgpud learns from NVML at its reconciles what
// it needs of a GPU (here the id of a type the catalog names only) and
// answers its listings from that, however often they come and however old
// its view: no listing waits for NVML (its helper takes tens of
// milliseconds to start on a real host). The listing still uses what NVML
// said: the full L40S is recognised as carrying the site's profile, which
// sysfs alone cannot show.
func TestListingsNeverAskNVML(t *testing.T) {
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelL40S, Address: pci.MustParseAddress(l40sAt)}}})
	if err != nil {
		t.Fatal(err)
	}
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelL40S, BusID: l40sAt})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	site := "version: v1\nmodel: NVIDIA L40S\nmatch: {vendor: 10de, devices: [26b9]}\ndialect: nvidia-vf\nframebuffer-mb: 49152\n" +
		"profiles:\n  - name: site-l40s-12q\n    split: 4\n    nvidia-type: {name: NVIDIA L40S-12Q}\n"
	if err := os.WriteFile(filepath.Join(dir, "site.yaml"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &countingMIG{Manager: nvmlstate.NewWith(nv, "simnvml")}
	r := newRig(t, k, "version: v1\ngpus:\n  - address: \""+l40sAt+"\"\n    profile: site-l40s-12q\n", dir)
	r.mig = m
	r.run()
	atStart := m.calls.Load()
	if atStart == 0 {
		t.Fatal("vgpud's start never asked NVML for the L40S's types: the test proves nothing")
	}
	for range 5 {
		r.d.engine.HostChanged() // a view as stale as it gets: discovered again
		gpus, err := r.c.GPUs(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(gpus) != 1 || gpus[0].Profile != "site-l40s-12q" {
			t.Fatalf("GET /v1/gpus: %+v, want the L40S carrying site-l40s-12q", gpus)
		}
		vs, err := r.c.VGPUs(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 4 || vs[0].Profile != "site-l40s-12q" {
			t.Fatalf("GET /v1/vgpus: %d vGPUs, want 4 of site-l40s-12q: %+v", len(vs), vs)
		}
		if _, err := r.c.Allocations(bg); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.calls.Load() - atStart; n != 0 {
		t.Errorf("listings asked NVML %d times", n)
	}
	// A reconcile of a GPU whose types NVML gave asks nothing again.
	if rep, err := r.c.Reconcile(bg); err != nil || rep.Error != "" {
		t.Fatalf("reconcile: %v %+v", err, rep)
	}
	if n := m.calls.Load() - atStart; n != 0 {
		t.Errorf("a no-op reconcile asked NVML %d times", n)
	}
}
