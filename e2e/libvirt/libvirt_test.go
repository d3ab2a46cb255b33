package libvirt

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
	"github.com/vgpu-project/vgpu/pkg/domxml"
)

// start runs virsh start after clearing what the probe recorded of the
// domain's last start; it returns virsh's stderr and error.
func (r *rig) start(name string) (string, error) {
	r.t.Helper()
	for _, f := range []string{name + ".vgpus.json", name + ".mdevs"} {
		if err := os.Remove(filepath.Join(r.probe, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.t.Fatal(err)
		}
	}
	_, errs, err := r.virsh("start", name)
	return errs, err
}

// duringStart is what the probe saw at prepare/begin, after vgpu ran.
type duringStart struct {
	held  map[string]string // as rig.held
	mdevs []string
}

func (r *rig) duringStart(name string) duringStart {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.probe, name+".vgpus.json"))
	if err != nil {
		r.t.Fatalf("the probe hook recorded nothing at prepare/begin of %s (did vgpu fail, or not run?): %v\nevents: %v", name, err, r.events(name))
	}
	var vs []api.VGPU
	if err := json.Unmarshal(b, &vs); err != nil {
		r.t.Fatalf("vgpuctl vgpus -o json in the probe: %v\n%s", err, b)
	}
	m, err := os.ReadFile(filepath.Join(r.probe, name+".mdevs"))
	if err != nil {
		r.t.Fatal(err)
	}
	return duringStart{held: daemontest.Held(vs), mdevs: strings.Fields(string(m))}
}

// wantReleasedAfterPrepare checks the hook calls of a start libvirt failed
// after vgpu made the vGPUs ready: prepare, then release.
func (r *rig) wantReleasedAfterPrepare(name string) {
	r.t.Helper()
	ev := r.events(name)
	p, rel := slices.Index(ev, "prepare begin"), slices.Index(ev, "release end")
	if p < 0 || rel < p {
		r.t.Fatalf("hook calls of %s: %v; want prepare begin, then release end", name, ev)
	}
}

// applyConfig replaces vgpud's config through vgpuctl.
func (r *rig) applyConfig(yaml string) {
	r.t.Helper()
	p := filepath.Join(r.dir, "apply.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.mustVgpuctl("apply", "-f", p)
}

// wantNoRequest checks the persistent XML has no vgpu request left.
func (r *rig) wantNoRequest(name string) {
	r.t.Helper()
	if x := r.mustVirsh("dumpxml", "--inactive", name); domxml.MayHaveRequest([]byte(x)) {
		r.t.Fatalf("%s still has a vgpu request:\n%s", name, x)
	}
}

// failStartUnderEachPolicy starts name (which asks for what) under the
// keep policy, then under destroy (cfgDestroy applied): each start must
// fail with libvirt's own refusal, after the hook succeeded (no "vgpu:"
// line). check then looks at the host under that policy.
func (r *rig) failStartUnderEachPolicy(name, what, refusal string, check func(policy string)) {
	r.t.Helper()
	for _, policy := range []string{"keep", "destroy"} {
		if policy == "destroy" {
			r.applyConfig(cfgDestroy)
		}
		errs, err := r.start(name)
		if err == nil {
			r.t.Fatalf("%s: %s started with %s this kernel cannot give it", policy, name, what)
		}
		if !strings.Contains(errs, refusal) || strings.Contains(errs, "vgpu:") {
			r.t.Fatalf("%s: virsh start: %s", policy, errs)
		}
		check(policy)
	}
}

// TestMdevRequest: a domain with a T4-4Q starts; the hook has vgpud create
// its mdev with the UUID derived from the domain and mark it attached; this
// kernel has no VFIO, so libvirt fails the start, and the release hook
// gives the vGPU back by the policy: keep leaves the mdev reserved for the
// domain, destroy removes it and refills the pool.
func TestMdevRequest(t *testing.T) {
	r := newRig(t, cfgKeep)
	r.installProbe()
	const name, uuid = "vgpu-mdev", "6c1f3e0a-2b4d-4e5f-8a9b-0c1d2e3f4a5b"
	r.define(name, uuid, "t4-4q", 1)
	m0, err := domxml.MdevUUID(uuid, 0)
	if err != nil {
		t.Fatal(err)
	}
	pool := r.mdevs()
	if len(pool) != 4 || slices.Contains(pool, m0) {
		t.Fatalf("mdevs before the start: %v", pool)
	}
	if got := r.held(); len(got) != 0 {
		t.Fatalf("attaching an mdev profile reserved %v", got)
	}

	r.failStartUnderEachPolicy(name, "an mdev", "Mediated host device assignment requires VFIO support", func(policy string) {
		during := r.duringStart(name)
		if len(during.held) != 1 || during.held[m0] != "attached "+name || !slices.Contains(during.mdevs, m0) {
			t.Fatalf("%s: while %s started, vgpud held %v and the host had mdevs %v; want %s attached and created",
				policy, name, during.held, during.mdevs, m0)
		}
		r.wantReleasedAfterPrepare(name)
		after, mdevs := r.held(), r.mdevs()
		switch policy {
		case "keep":
			if len(after) != 1 || after[m0] != "reserved "+name || !slices.Contains(mdevs, m0) {
				t.Fatalf("keep: after the failed start vgpud holds %v, mdevs %v; want %s reserved for %s and still there", after, mdevs, m0, name)
			}
		case "destroy":
			if len(after) != 0 || slices.Contains(mdevs, m0) || len(mdevs) != 4 {
				t.Fatalf("destroy: after the failed start vgpud holds %v, mdevs %v; want %s gone and the pool of 4 whole", after, mdevs, m0)
			}
		}
	})
	if out := r.mustVgpuctl("detach", name, "-c", r.uri); !strings.Contains(out, "asks for no vGPU any more") {
		t.Fatalf("detach:\n%s", out)
	}
	r.wantNoRequest(name)
}

// TestVFRequest: a domain with an MI25 VF: attach reserves the VF in vgpud
// and writes its address; the start makes it attached; libvirt cannot pass
// a PCI device through here and fails the start; the release hook puts the
// VF back to reserved (VFs stay the domain's under both policies: their
// address is in its XML), still on vfio-pci; detach frees it.
func TestVFRequest(t *testing.T) {
	r := newRig(t, cfgKeep)
	r.installProbe()
	const name, uuid, vf = "vgpu-vf", "0d9c8b7a-6f5e-4d3c-8b2a-19f8e7d6c5b4", "0000:03:00.1"
	r.define(name, uuid, "mi25-4g", 1)
	if got := r.held(); len(got) != 1 || got[vf] != "reserved "+name {
		t.Fatalf("after attach vgpud holds %v; want %s reserved", got, vf)
	}
	if x := r.mustVirsh("dumpxml", "--inactive", name); !strings.Contains(x, "bus='0x03' slot='0x00' function='0x1'") {
		t.Fatalf("the hostdev does not carry %s:\n%s", vf, x)
	}
	r.failStartUnderEachPolicy(name, "a VF", "host doesn't support passthrough of host PCI devices", func(policy string) {
		if during := r.duringStart(name); len(during.held) != 1 || during.held[vf] != "attached "+name {
			t.Fatalf("%s: while %s started vgpud held %v; want %s attached", policy, name, during.held, vf)
		}
		r.wantReleasedAfterPrepare(name)
		if got := r.held(); len(got) != 1 || got[vf] != "reserved "+name {
			t.Fatalf("%s: after the failed start vgpud holds %v; want %s reserved for %s", policy, got, vf, name)
		}
		drv, err := os.Readlink(filepath.Join(r.sim.Mnt, "sys", "bus", "pci", "devices", vf, "driver"))
		if err != nil || filepath.Base(drv) != "vfio-pci" {
			t.Fatalf("%s: %s on %q after the release (%v); want vfio-pci", policy, vf, drv, err)
		}
	})
	if out := r.mustVgpuctl("detach", name, "-c", r.uri); !strings.Contains(out, "released in vgpud: "+vf) {
		t.Fatalf("detach:\n%s", out)
	}
	r.wantNoRequest(name)
	if got := r.held(); len(got) != 0 {
		t.Fatalf("after detach vgpud holds %v", got)
	}
}

// TestNoRequest: a domain without a vGPU request starts and stops with the
// hook installed, and also while vgpud is stopped; a domain with a request
// then fails to start, with the hook's line saying vgpud is not running.
func TestNoRequest(t *testing.T) {
	r := newRig(t, cfgKeep)
	r.installProbe()
	const plain = "plain"
	r.define(plain, "3e2d1c0b-9a8f-4e7d-b6c5-a4b3c2d1e0f9", "", 0)
	run := func(why string) {
		t.Helper()
		if errs, err := r.start(plain); err != nil {
			t.Fatalf("%s: %v (%s)", why, err, errs)
		}
		if st := strings.TrimSpace(r.mustVirsh("domstate", plain)); st != "running" {
			t.Fatalf("%s: %s is %q", why, plain, st)
		}
		r.mustVirsh("destroy", plain)
		if st := strings.TrimSpace(r.mustVirsh("domstate", plain)); st != "shut off" {
			t.Fatalf("%s: after destroy %s is %q", why, plain, st)
		}
	}
	run("with vgpud")
	ev := r.events(plain)
	for _, want := range []string{"prepare begin", "start begin", "started begin", "stopped end", "release end"} {
		if !slices.Contains(ev, want) {
			t.Fatalf("hook calls of %s: %v; want %q among them", plain, ev, want)
		}
	}
	if got := r.held(); len(got) != 0 {
		t.Fatalf("a domain without a request got %v", got)
	}

	r.stopVgpud()
	run("with vgpud stopped")
	// An mdev request needs nothing from vgpud to be attached, but to start.
	const name = "vgpu-down"
	r.define(name, "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", "t4-4q", 1)
	errs, err := r.start(name)
	want := "vgpu: cannot make 1 x t4-4q ready for vgpu-down: vgpud unavailable on " + "/run/vgpud/vgpud.sock" +
		": no such file or directory (is vgpud running? systemctl start vgpud)"
	if err == nil || !strings.Contains(errs, want) {
		t.Fatalf("start of %s with vgpud stopped: %v\n%s\nwant %q", name, err, errs, want)
	}
	r.startVgpud()
	if got := r.held(); len(got) != 0 {
		t.Fatalf("vgpud holds %v after the refused start", got)
	}
}

// TestRequestCannotBeMet: virsh start fails with the hook's one line when
// vgpud cannot make the vGPUs ready, and nothing is held afterwards.
func TestRequestCannotBeMet(t *testing.T) {
	r := newRig(t, cfgKeep)
	for _, tc := range []struct {
		name, uuid, profile string
		count               int
		want                string
	}{
		{"vgpu-five", "7b6a5f4e-3d2c-4b1a-9f8e-7d6c5b4a3f2e", "t4-4q", 5,
			"vgpu: cannot make 5 x t4-4q ready for vgpu-five: need 5 x t4-4q, 4 free on this host"},
		{"vgpu-other", "8c7b6a5f-4e3d-4c2b-a1f0-9e8d7c6b5a4f", "t4-8q", 1,
			"vgpu: cannot make 1 x t4-8q ready for vgpu-other: need 1 x t4-8q, but no GPU on this host carries t4-8q"},
	} {
		r.define(tc.name, tc.uuid, tc.profile, tc.count)
		errs, err := r.start(tc.name)
		if err == nil || !strings.Contains(errs, tc.want) || strings.Count(errs, "vgpu: ") != 1 {
			t.Fatalf("virsh start %s: %v\n%s\nwant one line %q", tc.name, err, errs, tc.want)
		}
		if st := strings.TrimSpace(r.mustVirsh("domstate", tc.name)); st != "shut off" {
			t.Fatalf("%s is %q after the refused start", tc.name, st)
		}
	}
	// A VF profile the host does not carve fails at attach already.
	const name = "vgpu-l40s"
	r.define(name, "9d8c7b6a-5f4e-4d3c-b2a1-0f9e8d7c6b5a", "", 0)
	_, errs, code := r.vgpuctl("attach", name, "--profile", "l40s-12q", "-c", r.uri)
	if code != 1 || !strings.Contains(errs, "reserve 1 x l40s-12q for vgpu-l40s in vgpud") {
		t.Fatalf("attach of a profile the host does not carve: exit %d, %s", code, errs)
	}
	r.wantNoRequest(name)
	if got, mdevs := r.held(), r.mdevs(); len(got) != 0 || len(mdevs) != 4 {
		t.Fatalf("after the refusals vgpud holds %v and the host has mdevs %v", got, mdevs)
	}
}

// TestLiveAttachRollsBack: vgpuctl attach --live to a running domain has
// vgpud reserve and prepare the VF (attached, as a start would), then asks
// libvirt to hotplug it; this kernel has no VFIO, so libvirt refuses, and
// the VF is given back: vgpud holds nothing for the domain afterwards.
func TestLiveAttachRollsBack(t *testing.T) {
	r := newRig(t, cfgKeep)
	const name = "live01"
	r.define(name, "4b3a2c1d-0e9f-4a8b-8c7d-6e5f4a3b2c1e", "", 0)
	r.mustVirsh("start", name)
	_, errs, code := r.vgpuctl("attach", name, "--profile", "mi25-4g", "--live", "-c", r.uri)
	if code != 1 || !strings.Contains(errs, "attach the hostdev of vf") {
		t.Fatalf("attach --live without VFIO: exit %d, %s", code, errs)
	}
	if got := r.held(); len(got) != 0 {
		t.Fatalf("a refused hotplug left %v held", got)
	}
	if !strings.Contains(r.vgpud.Out.String(), `msg=prepared domain=live01`) {
		t.Fatalf("vgpud did not prepare the VF before the hotplug:\n%s", r.vgpud.Out)
	}
}
