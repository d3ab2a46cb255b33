package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// unchanged runs f and fails the test when the host changed.
func (c *cli) unchanged(f func()) {
	c.t.Helper()
	before, err := sysfstest.Snapshot(c.k)
	if err != nil {
		c.t.Fatal(err)
	}
	f()
	after, err := sysfstest.Snapshot(c.k)
	if err != nil {
		c.t.Fatal(err)
	}
	if d := sysfstest.Diff(before, after); d != "" {
		c.t.Fatalf("the host changed:\n%s", d)
	}
}

// The H200 passed through to a VM, as on the real host: nothing can be
// carved, the table says so (no dialect, no split), --why and -o json say
// why, profiles --gpu lists a line per catalog file with the reason, and a
// carve is refused in one line naming the same reasons, changing nothing.
func TestH200Guest(t *testing.T) {
	c := newCLI(t, "h200-guest.yaml")
	const gpu = "0000:00:06.0"
	c.unchanged(func() {
		out, errs, code := c.run("gpus")
		if code != 0 || errs != "vgpuctl: nothing can be carved on "+gpu+" now; vgpuctl gpus --why says why\n" {
			t.Fatalf("gpus: exit %d, stderr %q", code, errs)
		}
		golden(t, "gpus-h200-guest", out)
		golden(t, "gpus-h200-guest-why", c.ok("gpus", "--why"))
		golden(t, "profiles-gpu-h200-guest", c.ok("profiles", "--gpu", gpu))

		var gj struct{ GPUs []inventory.GPU }
		if err := json.Unmarshal([]byte(c.ok("gpus", "-o", "json")), &gj); err != nil {
			t.Fatal(err)
		}
		x := gj.GPUs[0]
		if len(x.Dialects) != 0 || len(x.Unavailable) != 2 || x.NVIDIADriver == nil || x.NVIDIADriver.VGPUHost || x.Guest == "" {
			t.Errorf("gpus -o json: dialects %v, unavailable %v, driver %+v, guest %q", x.Dialects, x.Unavailable, x.NVIDIADriver, x.Guest)
		}
		var rows []struct {
			Name     string   `json:"name"`
			HostGPUs []string `json:"hostGPUs"`
			WhyNot   string   `json:"whyNot"`
		}
		if err := json.Unmarshal([]byte(c.ok("profiles", "--gpu", gpu, "-o", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 11 { // 5 time-sliced, 5 MIG-backed, passthrough
			t.Errorf("profiles --gpu -o json: %d rows, want every profile of the H200 SXM", len(rows))
		}
		for _, r := range rows {
			if len(r.HostGPUs) != 0 || r.WhyNot == "" {
				t.Errorf("%s: host GPUs %v, why not %q", r.Name, r.HostGPUs, r.WhyNot)
			}
		}

		for _, tc := range []struct {
			profile string
			want    []string
		}{
			{"h200x-1-18c", []string{"NVIDIA H200 SXM 141GB (MIG-backed) cannot be split 7:1 on 0000:00:06.0: no SR-IOV capability: this OS is a guest (its PCI host bridge 0000:00:00.0 is QEMU's",
				"NVIDIA datacenter driver 580.159.04, not the vGPU host driver", "no profile of it fits right now"}},
			{"passthrough", []string{"cannot be passed through on 0000:00:06.0: no IOMMU group: enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel command line; in a VM, a vIOMMU)"}},
		} {
			for _, extra := range [][]string{{"--dry-run"}, nil, {"--force"}} {
				args := append([]string{"carve", gpu, "--profile", tc.profile}, extra...)
				_, errs, code := c.run(args...)
				if code != exitUsage || strings.Count(errs, "\n") != 1 {
					t.Errorf("%v: exit %d, stderr %q; want exit %d and one line", args, code, errs, exitUsage)
				}
				for _, w := range tc.want {
					if !strings.Contains(errs, w) {
						t.Errorf("%v: %q lacks %q", args, errs, w)
					}
				}
			}
		}
	})
}

// Bare metal under the datacenter driver: passthrough alone, and --why
// names the driver. NVML is not there to ask: nothing waits on it.
func TestDatacenterDriverHost(t *testing.T) {
	c := newCLI(t, "l40s-datacenter.yaml")
	golden(t, "gpus-l40s-datacenter-why", c.ok("gpus", "--why"))
	_, errs, code := c.run("carve", "0000:86:00.0", "-p", "l40s-12q", "--dry-run")
	if code != exitUsage || !strings.Contains(errs, "NVIDIA datacenter driver 580.159.04, not the vGPU host driver") || !strings.Contains(errs, "it can be passed through whole (profile passthrough)") {
		t.Errorf("carve l40s-12q: exit %d, %q", code, errs)
	}
}

// A desktop: the console's iGPU is refused (exit 3, the reason, nothing
// changed) unless forced; the RTX 4090, which no catalog file knows, is
// passed through by the built-in profile, listed as carrying it, and given
// back with its audio function.
func TestPassthroughDesktop(t *testing.T) {
	c := newCLI(t, "desktop.yaml")
	const igpu, dgpu = "0000:00:02.0", "0000:01:00.0"
	c.unchanged(func() {
		for _, extra := range [][]string{{"--dry-run"}, nil} {
			_, errs, code := c.run(append([]string{"carve", igpu, "-p", "passthrough"}, extra...)...)
			if code != exitInUse || !strings.Contains(errs, "it drives the host's console (boot_vga 1)") || !strings.Contains(errs, "--force") {
				t.Errorf("carve the console's GPU %v: exit %d, %q", extra, code, errs)
			}
		}
	})
	golden(t, "gpus-desktop-why", c.ok("gpus", "--why"))
	golden(t, "carve-rtx4090-passthrough", c.ok("carve", dgpu, "-p", "passthrough"))
	var vs []vgpu.VGPU
	if err := json.Unmarshal([]byte(c.ok("vgpus", "-o", "json")), &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].ID != dgpu || vs[0].Profile != "passthrough" {
		t.Errorf("vgpus after the passthrough: %+v", vs)
	}
	c.ok("uncarve", dgpu)
	for dev, want := range map[string]string{dgpu: "nouveau", "0000:01:00.1": "snd_hda_intel"} {
		if d := driverOfCLI(t, c, dev); d != want {
			t.Errorf("%s on %q after uncarve, want %q", dev, d, want)
		}
	}
	c.ok("carve", igpu, "-p", "passthrough", "--force")
	if d := driverOfCLI(t, c, igpu); d != "vfio-pci" {
		t.Errorf("forced: the iGPU on %q", d)
	}
}

func driverOfCLI(t *testing.T, c *cli, dev string) string {
	t.Helper()
	var gj struct{ GPUs []inventory.GPU }
	if err := json.Unmarshal([]byte(c.ok("gpus", "-o", "json")), &gj); err != nil {
		t.Fatal(err)
	}
	for _, g := range gj.GPUs {
		if g.Address.String() == dev {
			return g.Driver
		}
	}
	b, err := c.k.Readlink("/sys/bus/pci/devices/" + dev + "/driver")
	if err != nil {
		return ""
	}
	return b[strings.LastIndex(b, "/")+1:]
}
