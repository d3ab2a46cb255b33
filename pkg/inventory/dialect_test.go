package inventory

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

func TestDialects(t *testing.T) {
	mdevTypes := []MdevType{{ID: "nvidia-222", Name: "GRID T4-4Q"}}
	cases := []struct {
		name string
		g    GPU
		want []Dialect
	}{
		{"plain", GPU{VendorID: 0x1234}, []Dialect{DialectPassthrough}},
		{"AMD SR-IOV, no VFs yet", GPU{VendorID: 0x1002, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectSRIOV, DialectPassthrough}},
		{"T4: PF mdev types; its VFs are not vGPUs", GPU{VendorID: 0x10de, DeviceID: 0x1eb8, MdevTypes: mdevTypes, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectMdev, DialectPassthrough}},
		{"T4 unbound: no types shown", GPU{VendorID: 0x10de, DeviceID: 0x1eb8, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectPassthrough}},
		{"GVT-g", GPU{VendorID: 0x8086, MdevTypes: mdevTypes}, []Dialect{DialectMdev, DialectPassthrough}},
		{"L40S before VFs: table", GPU{VendorID: 0x10de, DeviceID: 0x26b9, SRIOV: &SRIOV{TotalVFs: 32}},
			[]Dialect{DialectNVIDIAVF, DialectPassthrough}},
		{"A100 before VFs: table", GPU{VendorID: 0x10de, DeviceID: 0x20b0, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectSRIOVMdev, DialectPassthrough}},
		{"unknown NVIDIA before VFs: both", GPU{VendorID: 0x10de, DeviceID: 0x9999, SRIOV: &SRIOV{TotalVFs: 8}},
			[]Dialect{DialectNVIDIAVF, DialectSRIOVMdev, DialectPassthrough}},
		{"A100 id but VFs show per-VF types: hardware wins", GPU{VendorID: 0x10de, DeviceID: 0x20b0,
			SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 1, VFs: []VF{{NVIDIA: &NVIDIAVF{}}}}},
			[]Dialect{DialectNVIDIAVF, DialectPassthrough}},
		{"VFs are mdev parents", GPU{VendorID: 0x10de, DeviceID: 0x9999,
			SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 2, VFs: []VF{{}, {MdevTypes: mdevTypes}}}},
			[]Dialect{DialectSRIOVMdev, DialectPassthrough}},
		{"AMD with VFs on vfio-pci", GPU{VendorID: 0x1002, SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 2, VFs: []VF{{}, {}}}},
			[]Dialect{DialectSRIOV, DialectPassthrough}},
		{"H200 without SR-IOV: nothing but passthrough", GPU{VendorID: 0x10de, DeviceID: 0x2335}, []Dialect{DialectPassthrough}},
		{"no IOMMU group: nothing", GPU{VendorID: 0x1002, IOMMUGroup: -1, SRIOV: &SRIOV{TotalVFs: 16}}, nil},
	}
	for _, c := range cases {
		if c.g.VendorID == VendorNVIDIA {
			c.g.NVIDIADriver = vgpuHost
		}
		if got, _, err := dialects(&c.g, branchOf(0)); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: dialects = %v, %v, want %v", c.name, got, err, c.want)
		}
	}
}

// Dialects the host stands in the way of are listed apart, with the
// reason; a PF-mdev board shows none under the datacenter driver and says
// so.
func TestDialectsUnavailable(t *testing.T) {
	dc := &NVIDIADriver{Version: "580.159.04"}
	for _, c := range []struct {
		name string
		g    GPU
		ok   []Dialect
		not  []Dialect
	}{
		{"H200 in a VM", GPU{VendorID: VendorNVIDIA, DeviceID: 0x2335, IOMMUGroup: -1, NVIDIADriver: dc, Guest: "QEMU"}, nil, []Dialect{DialectNVIDIAVF, DialectPassthrough}},
		{"L40S, datacenter driver", GPU{VendorID: VendorNVIDIA, DeviceID: 0x26b9, SRIOV: &SRIOV{TotalVFs: 32}, NVIDIADriver: dc}, []Dialect{DialectPassthrough}, []Dialect{DialectNVIDIAVF}},
		{"T4, datacenter driver", GPU{VendorID: VendorNVIDIA, DeviceID: 0x1eb8, SRIOV: &SRIOV{TotalVFs: 16}, NVIDIADriver: dc}, []Dialect{DialectPassthrough}, []Dialect{DialectMdev}},
		{"RTX 3090", GPU{VendorID: VendorNVIDIA, DeviceID: 0x2204}, []Dialect{DialectPassthrough}, nil},
	} {
		ok, not, err := dialects(&c.g, branchOf(580))
		var nd []Dialect
		for _, u := range not {
			nd = append(nd, u.Dialect)
			if u.Reason == "" {
				t.Errorf("%s: %s unavailable without a reason", c.name, u.Dialect)
			}
		}
		if err != nil || !reflect.DeepEqual(ok, c.ok) || !reflect.DeepEqual(nd, c.not) {
			t.Errorf("%s: dialects %v, unavailable %v, %v; want %v and %v", c.name, ok, not, err, c.ok, c.not)
		}
	}
}

// vgpuHost is NVIDIA's vGPU host driver, vGPU 17.0's.
var vgpuHost = &NVIDIADriver{Version: "550.54.10", VGPUHost: true}

// branchOf is a host on kernel 6.8+ whose nvidia module's branch reads b
// (0: none).
func branchOf(b int) func() (nvHost, error) { return hostOf(nvHost{branch: b}) }

func hostOf(h nvHost) func() (nvHost, error) { return func() (nvHost, error) { return h, nil } }

// Before its VFs exist an NVIDIA SR-IOV GPU shows nothing of its split:
// the host driver's branch picks per-VF types (R550, vGPU 17, on, on a
// kernel of 6.8 or later) or an mdev per VF; without one the device id
// guesses.
func TestDialectsByHostDriver(t *testing.T) {
	const (
		a100, l40s, t4, unknown = 0x20f1, 0x26b9, 0x1eb8, 0x9999
	)
	vf, mdevVF := []Dialect{DialectNVIDIAVF, DialectPassthrough}, []Dialect{DialectSRIOVMdev, DialectPassthrough}
	cases := []struct {
		device    uint16
		branch    int // 0: module absent or its version malformed
		oldKernel bool
		want      []Dialect
	}{
		{a100, 0, false, mdevVF},
		{a100, 535, false, mdevVF},
		{a100, 550, false, vf},
		{a100, 580, false, vf},
		{l40s, 0, false, vf},
		{l40s, 535, false, mdevVF}, // vGPU 16 has no per-VF types
		{l40s, 570, false, vf},
		{unknown, 0, false, []Dialect{DialectNVIDIAVF, DialectSRIOVMdev, DialectPassthrough}},
		{unknown, 535, false, mdevVF},
		{unknown, 580, false, vf},
		{t4, 550, false, []Dialect{DialectPassthrough}}, // unbound: its VFs are no vGPUs on any branch
		{a100, 550, true, mdevVF},                       // RHEL 9, Ubuntu 22.04: R550+ keeps mdevs there
		{l40s, 580, true, mdevVF},
		{l40s, 0, true, vf}, // no branch: the device id's guess
	}
	for _, c := range cases {
		g := GPU{VendorID: VendorNVIDIA, DeviceID: c.device, SRIOV: &SRIOV{TotalVFs: 16}, NVIDIADriver: vgpuHost}
		if got, _, err := dialects(&g, hostOf(nvHost{branch: c.branch, oldKernel: c.oldKernel})); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("10de:%04x on branch %d (kernel before 6.8: %v): dialects = %v, %v, want %v", c.device, c.branch, c.oldKernel, got, err, c.want)
		}
	}
}

// The branch is asked only where the hardware does not answer, and its
// read error fails the description.
func TestDialectsAskBranchOnlyWhenNeeded(t *testing.T) {
	asked := 0
	fail := func() (nvHost, error) { asked++; return nvHost{}, errors.New("read the nvidia module's version: EIO") }
	mdevTypes := []MdevType{{ID: "nvidia-472", Name: "NVIDIA A100-20C"}}
	for _, g := range []GPU{
		{VendorID: VendorAMD, SRIOV: &SRIOV{TotalVFs: 16}},
		{VendorID: VendorNVIDIA, DeviceID: 0x1eb8, SRIOV: &SRIOV{TotalVFs: 16}},
		{VendorID: VendorNVIDIA, DeviceID: 0x20f1, SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 1, VFs: []VF{{MdevTypes: mdevTypes}}}},
		{VendorID: VendorNVIDIA, DeviceID: 0x2204},
	} {
		g.NVIDIADriver = vgpuHost
		if _, _, err := dialects(&g, fail); err != nil {
			t.Errorf("10de:%04x: %v", g.DeviceID, err)
		}
	}
	if asked != 0 {
		t.Fatalf("branch asked %d times for GPUs whose dialects need none", asked)
	}
	// The hardware's word wins: VF mdevs on an R550 host stay sriov-mdev.
	g := GPU{VendorID: VendorNVIDIA, DeviceID: 0x20f1, SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 1, VFs: []VF{{MdevTypes: mdevTypes}}}, NVIDIADriver: vgpuHost}
	if got, _, _ := dialects(&g, branchOf(550)); !reflect.DeepEqual(got, []Dialect{DialectSRIOVMdev, DialectPassthrough}) {
		t.Errorf("A100 with VF mdevs on R550: %v", got)
	}
	g = GPU{VendorID: VendorNVIDIA, DeviceID: 0x20f1, SRIOV: &SRIOV{TotalVFs: 16}, NVIDIADriver: vgpuHost}
	if _, _, err := dialects(&g, fail); err == nil || asked != 1 {
		t.Fatalf("A100 before VFs with an unreadable version: %v (asked %d)", err, asked)
	}
}

func TestKernelVersion(t *testing.T) {
	for r, want := range map[string][2]int{
		"6.8.0-31-generic": {6, 8}, "5.14.0-427.13.1.el9_4.x86_64": {5, 14}, "6.12.48+deb13-amd64": {6, 12},
		"7.0": {7, 0}, "6.1.0-40-amd64\n": {6, 1},
	} {
		if ma, mi, ok := kernelVersion(strings.TrimSpace(r)); !ok || [2]int{ma, mi} != want {
			t.Errorf("kernelVersion(%q) = %d, %d, %v; want %v", r, ma, mi, ok, want)
		}
	}
	for _, r := range []string{"", "6", "six.8", "6.x"} {
		if _, _, ok := kernelVersion(r); ok {
			t.Errorf("kernelVersion(%q) ok", r)
		}
	}
}

func TestParseBranch(t *testing.T) {
	for v, want := range map[string]int{
		"550.54.10": 550, "535.230.02": 535, "580.65.05": 580, "570.124.03": 570, "418.66": 418,
		"": 0, "550": 0, "550.": 0, "550..10": 0, "abc": 0, "550.54.10-vgpu": 0, "v550.54": 0, "-550.54": 0,
	} {
		if got := parseBranch(v); got != want {
			t.Errorf("parseBranch(%q) = %d, want %d", v, got, want)
		}
	}
}

// The module's version file: absent without the module (no error), the
// branch when it reads as a version, 0 when it does not, an error naming
// the file when it cannot be read.
func TestReadNVIDIABranch(t *testing.T) {
	root := t.TempDir()
	f := sysfs.NewOS(root)
	if b, err := readNVIDIABranch(f); b != 0 || err != nil {
		t.Fatalf("without the module: %d, %v", b, err)
	}
	file := filepath.Join(root, NVIDIAVersion)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]int{"550.54.10\n": 550, "535.230.02\n": 535, "580.159.01\n": 580, "garbage\n": 0, "\n": 0} {
		if err := os.WriteFile(file, []byte(v), 0o444); err != nil {
			t.Fatal(err)
		}
		if b, err := readNVIDIABranch(f); b != want || err != nil {
			t.Errorf("version %q: %d, %v, want %d", v, b, err, want)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(file, 0o755); err != nil { // reads EISDIR
		t.Fatal(err)
	}
	if _, err := readNVIDIABranch(f); err == nil || !strings.Contains(err.Error(), NVIDIAVersion) || !strings.Contains(err.Error(), "nvidia module's version") {
		t.Fatalf("unreadable version: %v", err)
	}
}
