package daemon

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/api/convert"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/nvvf"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/xe"
)

var update = flag.Bool("update", false, "rewrite the wire format's golden files in ../api/testdata/")

// wireDir holds the golden JSON of API v1 (pkg/api's TestWireGolden reads
// them back).
const wireDir = "../api/testdata"

func ptr[T any](v T) *T { return &v }

// exampleGPU has every field of a GPU set.
func exampleGPU() inventory.GPU {
	pf := pci.MustParseAddress("0000:41:00.0")
	vf := pci.MustParseAddress("0000:41:00.4")
	return inventory.GPU{
		Address: pf, VendorID: 0x10de, DeviceID: 0x26b9, VendorName: "NVIDIA Corporation", DeviceName: "AD102GL [L40S]",
		Class: 0x030200, NUMANode: 1, IOMMUGroup: 40, Driver: "nvidia", FramebufferMB: 46068,
		Dialects:     []inventory.Dialect{inventory.DialectNVIDIAVF, inventory.DialectPassthrough},
		Unavailable:  []inventory.Unavailable{{Dialect: inventory.DialectMdev, Reason: "the VFs' types replace the PF's"}},
		BootVGA:      true,
		NVIDIADriver: &inventory.NVIDIADriver{Version: "550.54.10", VGPUHost: true},
		Guest:        "NVML says the GPU is passed through",
		SRIOV: &inventory.SRIOV{TotalVFs: 32, NumVFs: 1, VFDeviceID: 0x26b9, VFs: []inventory.VF{{
			Index: 0, Address: vf, Driver: "nvidia", IOMMUGroup: 41,
			MdevTypes: []mdev.Type{{ID: "nvidia-1155", Name: "NVIDIA L40S-12Q", Description: "num_heads=4", DeviceAPI: "vfio-pci",
				AvailableInstances: 1, MaxInstances: 1, FramebufferMB: 12288, Instances: []string{"8f0b5a4e-0000-4000-8000-000000000001"}}},
			NVIDIA: &inventory.NVIDIAVF{Creatable: []nvvf.VGPUType{{ID: 1155, Name: "NVIDIA L40S-12Q"}}, CurrentType: 1155},
		}}},
		MdevTypes: []mdev.Type{{ID: "nvidia-1154", Name: "NVIDIA L40S-8Q", DeviceAPI: "vfio-pci", AvailableInstances: 6}},
		Peers:     []inventory.Peer{{Address: pci.MustParseAddress("0000:41:00.1"), Class: 0x040300, Driver: "vfio-pci", Original: "snd_hda_intel"}},
		GIM:       &inventory.GIMState{VFNum: 4, SchedOption: 1, SchedIntervalMS: 6},
		Xe: &inventory.XeAdmin{Priority: "low", VFs: []xe.Sched{{ExecQuantumMS: 20, PreemptTimeoutUS: 40000, Priority: "normal"}},
			Quota: true, Quotas: []uint64{4 << 30}, VFIODriver: "xe-vfio-pci"},
		NVIDIATypes: []nvvf.VGPUType{{ID: 1154, Name: "NVIDIA L40S-8Q"}, {ID: 1155, Name: "NVIDIA L40S-12Q"}},
		MIGProfiles: []inventory.MIGProfile{{ID: 19, MemoryMB: 4864, Slices: 1, Count: 7}},
	}
}

// exampleResult is a carve whose ops carry every field of an op.
func exampleResult() carve.Result {
	gpu := pci.MustParseAddress("0000:41:00.0")
	return carve.Result{Plan: carve.Plan{
		GPU: gpu, Parent: "mbochs", Profile: "l40s-12q",
		Ops: []carve.Op{
			{Kind: carve.OpDriver, Device: gpu, VF: ptr(3), To: "vfio-pci", Count: 2, Override: ptr(""),
				Parent: "0000:41:00.4", Type: "nvidia-1155", UUID: "8f0b5a4e-0000-4000-8000-000000000001", Start: ptr(4),
				Instance: &nvstate.Instance{ID: 1, ProfileID: 19, Start: 4, Size: 1}, Keep: []int{1, 2},
				Sched:  &nvstate.Sched{Policy: 2, ARR: 1, TimesliceNS: 2000000, AvgFactor: 33, FrequencyHz: 480},
				Params: []string{"sched_option=1"}, Destroys: "8f0b5a4e-0000-4000-8000-000000000002", Autoprobe: ptr(false),
				Attr: "exec_quantum_ms", Value: "20", Bulk: true},
			{Kind: carve.OpMdevRemove},
		},
		Blocked: []vgpu.Blocker{{VGPU: "0000:41:00.4", Holder: "qemu-system-x86 (pid 4242)", Unknown: true}},
	}, Applied: 1}
}

func exampleVGPU() vgpu.VGPU {
	return vgpu.VGPU{ID: "0000:41:00.4", GPU: "0000:41:00.0", Kind: vgpu.KindNVIDIAVF, Parent: "0000:41:00.0",
		Type: "NVIDIA L40S-12Q", Profile: "l40s-12q", IOMMUGroup: 41, Driver: "nvidia", InUse: true, UseUnknown: true,
		Holder: "qemu-system-x86 (pid 4242)"}
}

// exampleAPIVGPU is exampleVGPU as vgpud lists it.
func exampleAPIVGPU(t0 time.Time) api.VGPU {
	v := convert.VGPU(exampleVGPU())
	v.NUMANode, v.VendorDriver, v.DriverVersion = 1, "nvidia", "550.54.10"
	v.State, v.DomainUUID, v.DomainName, v.Since, v.Expires = "attached", "6f1f1a0e-6f0b-4c2e-9a55-4a1f3e2a0b11", "web01", t0, t0.Add(time.Hour)
	v.Pod = convert.Pod(&ledger.Pod{Resource: "vgpu.example.org/l40s-12q"})
	return v
}

func exampleConfig() *config.Config {
	id, err := config.ParsePCIID("10de:26b9")
	if err != nil {
		panic(err)
	}
	return &config.Config{Path: "/etc/vgpud/config.yaml", Version: config.Version,
		GPUs: []config.Entry{
			{Address: pci.MustParseAddress("0000:41:00.0"), ID: id, All: true, Parent: "mbochs", Profile: "l40s-12q",
				MdevUUIDs: []string{"8f0b5a4e-0000-4000-8000-000000000001"}},
			{Profile: "mbochs-2"},
		},
		Socket: config.Socket{Group: "libvirt", AdminGroup: "vgpu-admin"}, OnRelease: config.ReleaseDestroy,
		Metrics: config.Metrics{Listen: "127.0.0.1:9847"},
		Kubernetes: config.Kubernetes{DevicePlugin: true, ResourceDomain: "vgpu.example.org", NVIDIAResourceNames: true,
			DevicePluginDir: config.DefaultDevicePluginDir, PodResourcesSocket: config.DefaultPodResourcesSocket}}
}

// wireExamples is an example of every body API v1 takes or answers, by
// its golden file's name: one with every field set and, as name.zero, the
// zero value (which pins the fields left out when empty).
func wireExamples() map[string]any {
	t0 := time.Date(2026, 11, 27, 4, 5, 6, 789000000, time.UTC)
	blocker := vgpu.Blocker{VGPU: "0000:41:00.4", Holder: "qemu-system-x86 (pid 4242)", Unknown: true}
	alloc := api.Allocation{VGPU: "0000:41:00.4", Kind: string(vgpu.KindNVIDIAVF), GPU: "0000:41:00.0", Profile: "l40s-12q",
		DomainUUID: "6f1f1a0e-6f0b-4c2e-9a55-4a1f3e2a0b11", DomainName: "web01", State: "attached", Since: t0}
	pod := convert.Pod(&ledger.Pod{Resource: "vgpu.example.org/l40s-12q", Namespace: "default", Name: "vm-web02", Container: "compute"})
	podAlloc := api.Allocation{VGPU: "0000:41:00.6", Kind: string(vgpu.KindNVIDIAVF), GPU: "0000:41:00.0", Profile: "l40s-12q",
		DomainUUID: "2b7c1e0e-1d2a-4f5b-8c3d-7e6f5a4b3c2d", DomainName: "default/vm-web02/compute", State: "attached", Since: t0, Pod: pod}
	lease := api.Lease{VGPU: "0000:41:00.5", Kind: string(vgpu.KindVF), GPU: "0000:41:00.0", Profile: "l40s-12q",
		DomainUUID: "6f1f1a0e-6f0b-4c2e-9a55-4a1f3e2a0b11", DomainName: "web01", Expires: t0.Add(time.Hour)}
	reconcile := api.ReconcileReport{Reason: "apply", Config: "/etc/vgpud/config.yaml", Generation: 3, Started: t0,
		Duration: "1.2s", GPUs: []api.GPUReport{{GPU: "0000:41:00.0", Profile: "l40s-12q", Action: "carve",
			Ops: []string{"set 0000:41:00.0 sriov_numvfs to 1"}, Refused: convert.Blockers([]vgpu.Blocker{blocker}),
			Restored: []string{"8f0b5a4e-0000-4000-8000-000000000001"}, Error: "write sriov_numvfs: device busy"}, {}},
		Changed: 1, Refused: 1, Failed: 1, Drift: 2, Error: "the config does not fit this host",
		Repaired: []string{"intent 7 (carve 0000:41:00.0): undone"}}
	numa := 1
	return map[string]any{
		"error": api.Error{Error: "uncarve 0000:41:00.0: vGPU 0000:41:00.4 is in use", Field: "gpu", Kind: api.KindInUse,
			Blocked: convert.Blockers([]vgpu.Blocker{blocker})},
		"error.zero": api.Error{},
		"health": api.Health{Status: "ok", Version: "1.2.3", PID: 4242, Config: "/etc/vgpud/config.yaml", ConfigLoaded: true,
			ConfigGeneration: 2, Ledger: "/var/lib/vgpud/ledger.db", Started: t0, LastReconcile: t0.Add(time.Minute), Drift: 1},
		"health.zero":           api.Health{},
		"gpus":                  []api.GPU{convert.GPU(exampleGPU(), "l40s-12q", "l40s-8q"), convert.GPU(inventory.GPU{}, "", "")},
		"vgpus":                 []api.VGPU{exampleAPIVGPU(t0), convert.VGPU(vgpu.VGPU{})},
		"holdings":              api.Holdings{Allocations: []api.Allocation{alloc, podAlloc, {}}, Leases: []api.Lease{lease, {}}},
		"holdings.zero":         api.Holdings{},
		"config":                convert.Config(exampleConfig()),
		"config.zero":           convert.Config(&config.Config{}),
		"reconcile-report":      reconcile,
		"reconcile-report.zero": api.ReconcileReport{},
		"apply-request":         api.ApplyRequest{Config: "version: v1\n", DryRun: true, Source: "new.yaml"},
		"apply-request.zero":    api.ApplyRequest{},
		"assert-request":        api.AssertRequest{Config: "version: v1\n", Source: "new.yaml"},
		"assert-request.zero":   api.AssertRequest{},
		"assert-report": api.AssertReport{Config: "/etc/vgpud/config.yaml", Match: true,
			GPUs: []api.Drift{{GPU: "0000:41:00.0", Desired: "l40s-12q", Actual: "l40s-8q", Ops: []string{"clear vGPU type of 0000:41:00.4"},
				Blocked: convert.Blockers([]vgpu.Blocker{blocker}), Error: "no such profile"}, {}},
			Missing: []api.Missing{{Allocation: alloc}, {}}, Error: "parse the config: line 1"},
		"assert-report.zero":   api.AssertReport{},
		"carve-request":        api.CarveRequest{GPU: "0000:41:00.0", Parent: "mbochs", Profile: "l40s-12q", Force: true, DryRun: true},
		"carve-request.zero":   api.CarveRequest{},
		"uncarve-request":      api.UncarveRequest{GPU: "0000:41:00.0", Parent: "mbochs", Force: true, DryRun: true},
		"uncarve-request.zero": api.UncarveRequest{},
		"carve-result":         convert.CarveResult(exampleResult(), true),
		"carve-result.zero":    convert.CarveResult(carve.Result{}, false),
		"reserve-request":      api.ReserveRequest{Name: "web01", Profile: "l40s-12q", Count: 2, NUMANode: &numa},
		"reserve-request.zero": api.ReserveRequest{},
		"prepare-request": api.PrepareRequest{Name: "web01", Profile: "l40s-12q", Count: 1,
			VGPUs: []string{"0000:41:00.4"}},
		"prepare-request.zero": api.PrepareRequest{},
		"release-request":      api.ReleaseRequest{Name: "web01"},
		"release-request.zero": api.ReleaseRequest{},
		"release-result": api.ReleaseResult{Policy: "destroy", Kept: []api.Allocation{alloc},
			Destroyed: []string{"8f0b5a4e-0000-4000-8000-000000000001"}, Cleared: []string{"0000:41:00.4"}, Reconcile: &reconcile},
		"release-result.zero": api.ReleaseResult{},
		"lease-request": api.LeaseRequest{Name: "web01", Profile: "l40s-12q", Count: 1, TTLSeconds: 600, NUMANode: &numa,
			DryRun: true},
		"lease-request.zero":     api.LeaseRequest{},
		"free-request":           api.FreeRequest{Force: true},
		"free-request.zero":      api.FreeRequest{},
		"migration-request":      api.MigrationRequest{Phase: api.MigrationCommit},
		"migration-request.zero": api.MigrationRequest{},
		"pod-grant": api.PodGrant{Allocations: []api.Allocation{podAlloc},
			DeviceNodes: []string{"/dev/vfio/vfio", "/dev/vfio/41", "/dev/iommu"}},
		"pod-grant.zero": api.PodGrant{},
	}
}

// TestWireGolden pins API v1's JSON: each example, as the server writes it
// (writeJSON), is its golden file byte for byte. A change of the wire
// format fails here; go test -run TestWireGolden -update rewrites them,
// which a version 1 client must still read.
func TestWireGolden(t *testing.T) {
	for name, v := range wireExamples() {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b = append(b, '\n')
		path := filepath.Join(wireDir, name+".json")
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (go test -run TestWireGolden -update writes it)", name, err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s: the wire format changed:\n got %s\nwant %s", path, b, want)
		}
	}
}
