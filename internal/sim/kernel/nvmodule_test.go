package simkernel

import (
	"strings"
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
		if got := read(t, NewExample(t, c.file), nvidiaVersion); got != c.want {
			t.Errorf("%s: version %q, want %q", c.file, got, c.want)
		}
	}
	for _, f := range []string{"mi25.yaml", "plain.yaml", "gvtg.yaml", "newgim.yaml"} {
		wantExists(t, NewExample(t, f), "/sys/module/nvidia", false)
	}
	k := parseKernel(t, "h.yaml", []byte("version: v1\nnvidiaDriver: 580.65.05\ngpus:\n  - model: h100-vf\n    address: 0000:cb:00.0\n"))
	if got := read(t, k, nvidiaVersion); got != "580.65.05\n" {
		t.Errorf("nvidiaDriver 580.65.05: version %q", got)
	}
}

// An A100 whose VFs take mdevs runs on any branch: from R550 on, that is a
// host on a kernel before 6.8. Its VFs still become mdev parents.
func TestA100MdevPerVFOnR550(t *testing.T) {
	k := NewFor(t, Host{NVIDIADriver: "570.124.03", GPUs: []HostGPU{{Model: ModelA100, Address: pci.MustParseAddress(a100Addr)}}})
	if got := read(t, k, nvidiaVersion); got != "570.124.03\n" {
		t.Fatalf("version %q", got)
	}
	sriovManage(t, k, "-e", a100Addr)
	vf0 := linkBase(t, k, devPath(a100Addr, "virtfn0"))
	wantExists(t, k, "/sys/class/mdev_bus/"+vf0, true)
	wantExists(t, k, devPath(vf0, "nvidia/current_vgpu_type"), false)
	if got := read(t, k, "/proc/sys/kernel/osrelease"); got != KernelBeforeNVVFIO+"\n" {
		t.Fatalf("osrelease %q, want a kernel before 6.8", got)
	}
}

// Every host states its kernel release, by default one that agrees with
// its xe ABI and NVIDIA VFs; a host file's release must agree with them
// too.
func TestKernelRelease(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"a100.yaml", Kernel619 + "\n"}, // R535: mdevs on any kernel
		{"l40s.yaml", Kernel619 + "\n"},
		{"mi25.yaml", Kernel619 + "\n"},
	} {
		if got := read(t, NewExample(t, c.file), "/proc/sys/kernel/osrelease"); got != c.want {
			t.Errorf("%s: osrelease %q, want %q", c.file, got, c.want)
		}
	}
	l40s := func(kernel string) Host {
		return Host{Kernel: kernel, GPUs: []HostGPU{{Model: ModelL40S, Address: pci.MustParseAddress("0000:86:00.0")}}}
	}
	k := NewFor(t, l40s("6.8.0-31-generic"))
	if got := read(t, k, "/proc/sys/kernel/osrelease"); got != "6.8.0-31-generic\n" {
		t.Fatalf("osrelease %q", got)
	}
	for _, c := range []struct {
		h    Host
		want string
	}{
		{l40s("5.14.0-427.el9.x86_64"), "older than 6.8"},
		{l40s("six"), `"six" is not a kernel release`},
		{Host{NVIDIADriver: "550.54.10", Kernel: "6.8.0", GPUs: []HostGPU{{Model: ModelA100, Address: pci.MustParseAddress(a100Addr)}}}, "gives each VF a vGPU type"},
	} {
		if err := c.h.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kernel %q: err = %v, want %q", c.h.Kernel, err, c.want)
		}
	}
}
