package simkernel

import (
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

const nvidiaVersion = "/sys/module/nvidia/version"

// The nvidia module states its version once loaded: the host file's, else
// vGPU 16's where VFs take mdevs and vGPU 17's elsewhere. A host without
// the module has no entry.
func TestNVIDIAModuleVersion(t *testing.T) {
	for _, c := range []struct {
		file, want string
	}{
		{"a100.yaml", "535.230.02\n"},
		{"a100-vf.yaml", "550.54.10\n"},
		{"l40s.yaml", "550.54.10\n"},
		{"t4.yaml", "550.54.10\n"},
		{"mixed.yaml", "550.54.10\n"},
		{"all.yaml", "550.54.10\n"},
	} {
		if got := read(t, loadExample(t, c.file), nvidiaVersion); got != c.want {
			t.Errorf("%s: version %q, want %q", c.file, got, c.want)
		}
	}
	for _, f := range []string{"mi25.yaml", "plain.yaml", "gvtg.yaml", "newgim.yaml"} {
		wantExists(t, loadExample(t, f), "/sys/module/nvidia", false)
	}
	h, err := ParseHost("h.yaml", []byte("version: v1\nnvidiaDriver: 580.65.05\ngpus:\n  - model: h100-vf\n    address: 0000:cb:00.0\n"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := New(h)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, nvidiaVersion); got != "580.65.05\n" {
		t.Errorf("nvidiaDriver 580.65.05: version %q", got)
	}
}

// An A100 whose VFs take mdevs runs on any branch: from R550 on, that is a
// host on a kernel before 6.8. Its VFs still become mdev parents.
func TestA100MdevPerVFOnR550(t *testing.T) {
	k, err := New(Host{NVIDIADriver: "570.124.03", GPUs: []HostGPU{{Model: ModelA100, Address: pci.MustParseAddress(a100Addr)}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, k, nvidiaVersion); got != "570.124.03\n" {
		t.Fatalf("version %q", got)
	}
	sriovManage(t, k, "-e", a100Addr)
	vf0 := linkBase(t, k, devPath(a100Addr, "virtfn0"))
	wantExists(t, k, "/sys/class/mdev_bus/"+vf0, true)
	wantExists(t, k, devPath(vf0, "nvidia/current_vgpu_type"), false)
}
