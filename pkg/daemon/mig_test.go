//go:build cgo

package daemon

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simnvml "github.com/vgpu-project/vgpu/internal/sim/nvml"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/profile"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const (
	migGPU = "0000:ca:00.0"
	l40sAt = "0000:86:00.0"
	cfgMIG = `version: v1
gpus:
  - address: "0000:ca:00.0"
    profile: a100-1-5c
  - address: "0000:86:00.0"
    profile: l40s-12q
`
)

// migHost is an A100 on a vGPU 17+ host next to an L40S, as after a boot:
// no VFs, no GPU instances, MIG off (or left on, as Ampere keeps it).
func migHost(t *testing.T, modeOn bool) (*simkernel.Kernel, *simnvml.Server) {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{
		{Model: simkernel.ModelA100VF, Address: pci.MustParseAddress(migGPU)}, {Model: simkernel.ModelL40S, Address: pci.MustParseAddress(l40sAt)}}})
	if err != nil {
		t.Fatal(err)
	}
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelA100PCIe40GB, BusID: migGPU})
	if err != nil {
		t.Fatal(err)
	}
	if modeOn {
		nv.Init()
		dev, _ := nv.DeviceGetHandleByPciBusId(migGPU)
		dev.SetMigMode(1)
		nv.Shutdown()
	}
	k.SetMIG(nv)
	return k, nv
}

// TestMIGBootReapply: vgpud's start carves the MIG-backed profile, and
// after a reboot (nothing of it persists) its next start does it again.
func TestMIGBootReapply(t *testing.T) {
	k, nv := migHost(t, false)
	r := newRig(t, k, cfgMIG)
	r.mig = nvmlstate.NewWith(nv, "simnvml")
	r.run()
	check := func(nv *simnvml.Server) {
		t.Helper()
		vs, err := r.c.VGPUs(bg)
		if err != nil {
			t.Fatal(err)
		}
		got := countBy(vs, func(v api.VGPU) string { return v.Profile + "/" + v.State })
		if got["a100-1-5c/free"] != 7 || got["l40s-12q/free"] != 4 || len(vs) != 11 {
			t.Fatalf("vGPUs: %v", got)
		}
		if n := len(nv.Instances(migGPU)); n != 7 {
			t.Fatalf("%d GPU instances, want 7", n)
		}
	}
	check(nv)
	// vgpud's GPU listing states NVML's sizes: the GPU instance profiles
	// with their memory (1g.5gb: 4864 MiB, not the 5 GB of its name).
	gpus, err := r.c.GPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gpus {
		if g.Address != migGPU {
			continue
		}
		if p, ok := g.MIGProfile(19); !ok || p.MemoryMB != 4864 || g.FramebufferMB != 40960 {
			t.Fatalf("vgpud lists the A100 with %d MiB and profile 19 %+v (%v); want NVML's 40960 and 4864", g.FramebufferMB, p, ok)
		}
	}
	if a, err := r.c.Assert(bg, nil); err != nil || !a.Match {
		t.Fatalf("assert after start = %+v, %v", a, err)
	}
	// Without NVML a look judges by the VFs' types: the host matches.
	if a := engine.Assert(bg, engine.AssertInput{FS: k, Catalog: r.d.engine.Catalog(), Config: r.d.engine.Config()}); !a.Match || a.Error != "" {
		t.Fatalf("assert without NVML = %+v", a)
	}
	r.stop()

	k2, nv2 := migHost(t, true) // rebooted: MIG mode kept, the rest gone
	r.k, r.mig = k2, nvmlstate.NewWith(nv2, "simnvml")
	r.run()
	check(nv2)
}

// TestMIGWithoutNVML: on a host without libnvidia-ml vgpud starts and
// serves every other GPU; the MIG-backed one fails with one line naming
// the GPU and the library.
func TestMIGWithoutNVML(t *testing.T) {
	k, _ := migHost(t, false)
	r := newRig(t, k, cfgMIG)
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	r.mig = nvmlstate.New(lib)
	r.run()
	vs, err := r.c.VGPUs(bg)
	if err != nil {
		t.Fatal(err)
	}
	got := countBy(vs, func(v api.VGPU) string { return v.Profile + "/" + v.State })
	if got["l40s-12q/free"] != 4 || len(vs) != 4 {
		t.Fatalf("vGPUs: %v", got)
	}
	rep, err := r.c.Reconcile(bg)
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	for _, g := range rep.GPUs {
		if g.GPU == migGPU {
			msg = g.Error
		}
	}
	if !strings.Contains(msg, migGPU) || !strings.Contains(msg, lib) || strings.Contains(msg, "\n") {
		t.Fatalf("A100 error = %q, want one line naming the GPU and %s", msg, lib)
	}
}

// l40sHost is an L40S on a vGPU 17+ host as after a boot, its NVML joined
// to the kernel.
func l40sHost(t *testing.T) (*simkernel.Kernel, *simnvml.Server) {
	t.Helper()
	k, err := simkernel.New(simkernel.Host{Version: "v1", GPUs: []simkernel.HostGPU{{Model: simkernel.ModelL40S, Address: pci.MustParseAddress(l40sAt)}}})
	if err != nil {
		t.Fatal(err)
	}
	nv, err := simnvml.New(simnvml.GPU{Model: simnvml.ModelL40S, BusID: l40sAt})
	if err != nil {
		t.Fatal(err)
	}
	nv.SetVGPUs(k.VGPUs)
	k.SetMIG(nv)
	return k, nv
}

// TestNVMLStateBootReapply: vgpud's start sets a profile's vGPU scheduler
// before it makes the vGPUs, and its mixed-size mode after sriov-manage -e;
// after a reboot (the driver reloads: best effort and equal-size again)
// its next start sets them again.
func TestNVMLStateBootReapply(t *testing.T) {
	gpu := pci.MustParseAddress(l40sAt)
	for _, tc := range []struct {
		prof  string
		check func(m nvstate.Manager) error
	}{
		{"l40s-12q-fixed", func(m nvstate.Manager) error {
			sc, err := m.Scheduler(gpu)
			if err != nil || sc.Policy != nvstate.PolicyFixedShare || sc.TimesliceNS != 2_000_000 {
				return fmt.Errorf("scheduler %+v, %v", sc, err)
			}
			return nil
		}},
		{"l40s-12q-mixed", func(m nvstate.Manager) error {
			if on, err := m.MixedSize(gpu); err != nil || !on {
				return fmt.Errorf("mixed-size mode %v, %v", on, err)
			}
			return nil
		}},
	} {
		t.Run(tc.prof, func(t *testing.T) {
			k, nv := l40sHost(t)
			r := newRig(t, k, "version: v1\ngpus:\n  - address: \""+l40sAt+"\"\n    profile: "+tc.prof+"\n")
			r.mig = nvmlstate.NewWith(nv, "simnvml")
			r.run()
			check := func(when string) {
				t.Helper()
				if err := tc.check(r.mig); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				vs, err := r.c.VGPUs(bg)
				if err != nil || len(vs) != 4 {
					t.Fatalf("%s: vGPUs = %+v, %v", when, vs, err)
				}
			}
			check("after vgpud's start")
			if a, err := r.c.Assert(bg, nil); err != nil || !a.Match {
				t.Fatalf("assert after start = %+v, %v", a, err)
			}
			r.stop()

			k2, nv2 := l40sHost(t)
			r.k, r.mig = k2, nvmlstate.NewWith(nv2, "simnvml")
			r.run()
			check("after vgpud's start on the rebooted host")
		})
	}
}

// TestMixedSizeAssert: assert shows a GPU whose vGPUs are as the profile
// wants but whose mixed-size mode is not, and the step that sets it.
func TestMixedSizeAssert(t *testing.T) {
	cfg, err := config.Parse("config.yaml", []byte("version: v1\ngpus:\n  - address: \""+l40sAt+"\"\n    profile: l40s-12q-mixed\n"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := profile.Load()
	if err != nil {
		t.Fatal(err)
	}
	k3, nv3 := l40sHost(t)
	c := carve.New(k3, cat, carve.NewFileDriverStore(filepath.Join(t.TempDir(), "drivers.json")), carve.WithMIG(nvmlstate.NewWith(nv3, "simnvml")))
	if _, err := c.Carve(bg, vgpu.GPU(pci.MustParseAddress(l40sAt)), "l40s-12q", carve.Options{}); err != nil {
		t.Fatal(err)
	}
	a := engine.Assert(bg, engine.AssertInput{FS: k3, Catalog: cat, Config: cfg, MIG: nvmlstate.NewWith(nv3, "simnvml")})
	if a.Match || len(a.GPUs) != 1 || !slices.ContainsFunc(a.GPUs[0].Ops, func(o string) bool { return strings.Contains(o, "turn mixed-size mode on") }) {
		t.Fatalf("assert on an equal-size GPU = %+v", a)
	}
}
