package simkernel

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

func TestParseHostErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"empty", "", []string{"h.yaml", "empty host description"}},
		{"no version", "gpus:\n  - model: t4\n    address: 0000:3b:00.0\n", []string{"h.yaml", "version: missing", "allowed: v1"}},
		{"bad version", "version: v2\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n", []string{"version: unknown \"v2\"", "allowed: v1"}},
		{"unknown field", "version: v1\ngpu: []\n", []string{"h.yaml", "field gpu not found"}},
		{"unknown gpu field", "version: v1\ngpus:\n  - model: t4\n    adress: 0000:3b:00.0\n", []string{"field adress not found"}},
		{"no gpus", "version: v1\n", []string{"gpus: empty", "s7150, mi25"}},
		{"unknown model", "version: v1\ngpus:\n  - model: mi52\n    address: 0000:03:00.0\n",
			[]string{"h.yaml", "gpus[0].model", `unknown model "mi52"`, "allowed: s7150, mi25, t4, a100, a100-vf, h100-vf, a30-vf, l40s, gvtg, plain, mbochs, mtty, qemu-nvme"}},
		{"missing model", "version: v1\ngpus:\n  - address: 0000:03:00.0\n", []string{"gpus[0].model: missing", "allowed: s7150"}},
		{"bad address", "version: v1\ngpus:\n  - model: t4\n    address: 3b:00.9\n", []string{"gpus[0].address", "invalid PCI address", "function must be 0 to 7"}},
		{"missing address", "version: v1\ngpus:\n  - model: t4\n", []string{"gpus[0].address: missing", "model t4"}},
		{"not function 0", "version: v1\ngpus:\n  - model: t4\n    address: 0000:3b:00.1\n", []string{"gpus[0].address", "not function 0"}},
		{"duplicate address", "version: v1\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n  - model: mi25\n    address: 3b:00.0\n",
			[]string{"gpus[1].address: duplicate address 0000:3b:00.0", "gpus[0]"}},
		{"vf clash", "version: v1\ngpus:\n  - model: mi25\n    address: 0000:03:00.0\n  - model: t4\n    address: 0000:03:01.0\n",
			[]string{"gpus[0].address", "VF 7 of 0000:03:00.0 would be 0000:03:01.0", "gpus[1]"}},
		{"virtual with address", "version: v1\ngpus:\n  - model: mbochs\n    address: 0000:05:00.0\n", []string{"gpus[0].address", "virtual mdev parent", "no address"}},
		{"virtual twice", "version: v1\ngpus:\n  - model: mtty\n  - model: mtty\n", []string{"gpus[1].model", "already listed at gpus[0]"}},
		{"unknown driver", "version: v1\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n    driver: nvidiaa\n",
			[]string{"gpus[0].driver", `unknown driver "nvidiaa"`, "none", "vfio-pci", "nvidia"}},
		{"driver that cannot drive the model", "version: v1\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n    driver: nvme\n",
			[]string{"gpus[0].driver", "nvme cannot drive model t4", "allowed", "nvidia, vfio-pci, pci-stub"}},
		{"numa out of range", "version: v1\nnumaNodes: 2\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n    numaNode: 2\n",
			[]string{"gpus[0].numaNode: 2 out of range", "-1 to 1"}},
		{"nvidia driver not a version", "version: v1\nnvidiaDriver: R550\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n",
			[]string{"h.yaml", `nvidiaDriver: "R550" is not a driver version`, "550.54.10"}},
		{"nvidia driver without nvidia", "version: v1\nnvidiaDriver: 550.54.10\ngpus:\n  - model: plain\n    address: 0000:0a:00.0\n",
			[]string{"nvidiaDriver: no GPU of the host loads the nvidia driver"}},
		{"per-VF types before R550", "version: v1\nnvidiaDriver: 535.230.02\ngpus:\n  - model: t4\n    address: 0000:3b:00.0\n  - model: a100-vf\n    address: 0000:ca:00.0\n",
			[]string{"nvidiaDriver: 535.230.02 is older than R550 (vGPU 17)", "model a100-vf (gpus[1])"}},
		{"VF mdevs and VF types on one host", "version: v1\ngpus:\n  - model: l40s\n    address: 0000:86:00.0\n  - model: a100\n    address: 0000:65:00.0\n",
			[]string{"gpus[0].model: l40s takes a vGPU type per VF", "a100 (gpus[1]) an mdev per VF", "one NVIDIA host driver"}},
		{"two documents", "version: v1\ngpus:\n  - model: mtty\n---\nversion: v1\n", []string{"more than one YAML document"}},
		{"not yaml", "version: [v1\n", []string{"h.yaml", "yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHost("h.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("ParseHost succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseHost(t *testing.T) {
	h, err := ParseHost("h.yaml", []byte(`version: v1
numaNodes: 2
gpus:
  - model: l40s
    address: 86:00.0
    numaNode: 1
  - model: gvtg
  - model: plain
    address: 0000:0a:00.0
    driver: none
  - model: mbochs
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Host{Version: "v1", NUMANodes: 2, GPUs: []HostGPU{
		{Model: "l40s", Address: pci.MustParseAddress("0000:86:00.0"), NUMANode: 1},
		{Model: "gvtg"},
		{Model: "plain", Address: pci.MustParseAddress("0000:0a:00.0"), Driver: "none"},
		{Model: "mbochs"},
	}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("ParseHost = %+v\nwant %+v", h, want)
	}
	k := NewFor(t, h)
	if got := read(t, k, devPath(l40sAddr, "numa_node")); got != "1\n" {
		t.Errorf("numa_node = %q, want 1", got)
	}
	if got := driverOf(k, gvtgAddr); got != DrvI915 {
		t.Errorf("gvtg at its default address has driver %q, want i915", got)
	}
	if got := driverOf(k, plainAddr); got != "" {
		t.Errorf("driver: none left the device on %q", got)
	}
	k2 := NewFor(t, Host{GPUs: []HostGPU{{Model: "plain", Address: pci.MustParseAddress(plainAddr), Driver: DrvVFIOPCI}}})
	if got := driverOf(k2, plainAddr); got != DrvVFIOPCI {
		t.Errorf("driver: vfio-pci at boot gave %q", got)
	}
	wantExists(t, k2, "/dev/vfio/"+groupOf(t, k2, devPath(plainAddr, "")), true)
	if got := read(t, k, "/sys/devices/system/node/online"); got != "0-1\n" {
		t.Errorf("node/online = %q", got)
	}
}

func TestLoadHostNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("version: v1\ngpus:\n  - model: mi52\n    address: 0000:03:00.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadHost(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "mi52") {
		t.Fatalf("LoadHost error %v does not name the file and the model", err)
	}
	if _, err := LoadHost(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("LoadHost of a missing file succeeded")
	}
}

// Every example host file parses and builds, and there is one per model.
func TestExampleHosts(t *testing.T) {
	for _, m := range Models() {
		t.Run(m, func(t *testing.T) {
			k := NewExample(t, m+".yaml")
			if len(k.Host().GPUs) != 1 || k.Host().GPUs[0].Model != m {
				t.Fatalf("%s.yaml describes %+v", m, k.Host().GPUs)
			}
		})
	}
	for _, f := range []string{"mixed.yaml", "all.yaml", "newgim.yaml", "desktop.yaml", "l40s-datacenter.yaml"} {
		t.Run(f, func(t *testing.T) { NewExample(t, f) })
	}
	// all.yaml has every model but new GIM's, which cannot share a host
	// with old GIM's s7150 (newgim.yaml has those), a100, whose VFs take
	// mdevs where the vGPU 17+ models' take types, and h200-guest, a VM
	// guest's view.
	seen := map[string]bool{}
	for _, f := range []string{"all.yaml", "newgim.yaml", "a100.yaml", "h200-guest.yaml"} {
		for _, g := range NewExample(t, f).Host().GPUs {
			seen[g.Model] = true
		}
	}
	for _, m := range Models() {
		if !seen[m] {
			t.Errorf("none of all.yaml, newgim.yaml, a100.yaml and h200-guest.yaml has model %s", m)
		}
	}
}

func TestNewRejectsInvalidHost(t *testing.T) {
	_, err := New(Host{GPUs: []HostGPU{{Model: "t4"}}})
	if err == nil || !strings.Contains(err.Error(), "gpus[0].address: missing") {
		t.Fatalf("New error = %v", err)
	}
	k, err := New(Host{})
	if err != nil {
		t.Fatalf("an empty Host literal must build (tests use it): %v", err)
	}
	wantExists(t, k, "/dev/vfio/vfio", true)
}
