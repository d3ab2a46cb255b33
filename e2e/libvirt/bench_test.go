package libvirt

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/internal/benchstat"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
	"github.com/vgpu-project/vgpu/pkg/domxml"
)

// samples is how many starts (or hook runs) each benchmark times: enough
// for a p99 that is not just the maximum of a handful.
const samples = 30

// report adds the median and p99 of ds in milliseconds, and makes ns/op
// their mean (one op is one sample, whatever b.N).
func report(b *testing.B, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		b.Fatal("no samples")
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	b.ReportMetric(float64(sum)/float64(len(ds)), "ns/op")
	benchstat.Quantiles(b, ds, "")
}

// BenchmarkVirshStartNoRequest times `virsh start` of a domain without a
// vGPU request on a libvirtd with vgpu-hook installed (libvirt formats the
// domain XML and runs the hook for prepare, start and started; the hook
// exits having searched the XML for our namespace) and on one with no hook
// at all, destroying the domain between starts. The two alternate in
// blocks of starts, libvirtd restarted at each switch (it looks for hooks
// when it starts), so a machine busy with something else weighs on both
// alike. median-ms and p99-ms are with the hook; added-median-ms is the
// difference of the medians.
func BenchmarkVirshStartNoRequest(b *testing.B) {
	r := newRig(b, cfgKeep)
	const name, blocks = "bench-plain", 6
	r.define(name, "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f1", "", 0)
	var with, without []time.Duration
	for b.Loop() {
		for i := range 2 * blocks {
			hook := i%2 == 1
			args := []string{"hook", "uninstall"}
			if hook {
				args = []string{"hook", "install", "--hook-binary", built.hook}
			}
			if out, err := r.nsenter(built.vgpuctl, args...).CombinedOutput(); err != nil {
				b.Fatalf("vgpuctl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			r.restartLibvirtd()
			// The first start after a daemon start pays for cold caches.
			r.mustVirsh("start", name)
			r.mustVirsh("destroy", name)
			for range samples / blocks {
				t := time.Now()
				r.mustVirsh("start", name)
				d := time.Since(t)
				r.mustVirsh("destroy", name)
				if hook {
					with = append(with, d)
				} else {
					without = append(without, d)
				}
			}
		}
	}
	b.StopTimer()
	report(b, with)
	benchstat.Quantiles(b, without, "nohook-")
	b.ReportMetric(benchstat.Ms(benchstat.Quantile(with, 0.5)-benchstat.Quantile(without, 0.5)), "added-median-ms")
}

// runHook runs the installed hook exactly as libvirt does: its argv, the
// domain XML on stdin, libvirt's environment (LC_ALL, PATH, HOME), plus
// VGPU_SOCKET, for the benchmark runs outside libvirt's namespace.
func runHook(b *testing.B, r *rig, xml []byte, args ...string) time.Duration {
	b.Helper()
	c := exec.Command(filepath.Join(r.dir, "hooks", "qemu.d", "vgpu"), args...)
	c.Env = []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH"), "HOME=/root", "VGPU_SOCKET=" + r.socket}
	c.Stdin = bytes.NewReader(xml)
	var errb bytes.Buffer
	c.Stderr = &errb
	t := time.Now()
	err := c.Run()
	d := time.Since(t)
	if err != nil {
		b.Fatalf("hook %v: %v: %s", args, err, errb.String())
	}
	return d
}

// benchHook times the hook's prepare/begin plus release/end for a domain
// with count x profile ("" none), as libvirt runs them around a start and
// a stop, against the running vgpud.
func benchHook(b *testing.B, profile string, count int) {
	r := newRig(b, cfgKeep)
	const name = "bench-hook"
	r.define(name, "2a3b4c5d-6e7f-4a8b-9cad-becfd0e1f203", profile, count)
	xml := []byte(r.mustVirsh("dumpxml", name))
	d, err := domxml.Parse(xml)
	if err != nil {
		b.Fatal(err)
	}
	var ds, prep, direct []time.Duration
	for b.Loop() {
		for range samples {
			p := runHook(b, r, xml, name, "prepare", "begin", "-")
			rel := runHook(b, r, xml, name, "release", "end", "-")
			ds, prep = append(ds, p+rel), append(prep, p)
		}
	}
	b.StopTimer()
	// vgpud's share: the same prepare and release straight over the API.
	if d.Request != nil {
		var ids []string
		for _, v := range d.Hostdevs {
			ids = append(ids, v.ID())
		}
		for range samples {
			t := time.Now()
			if _, err := r.c.Prepare(b.Context(), d.UUID, api.PrepareRequest{Name: d.Name, Profile: d.Request.Profile, VGPUs: ids}); err != nil {
				b.Fatal(err)
			}
			if _, err := r.c.Release(b.Context(), d.UUID, api.ReleaseRequest{Name: d.Name}); err != nil {
				b.Fatal(err)
			}
			direct = append(direct, time.Since(t))
		}
		b.ReportMetric(benchstat.Ms(benchstat.Quantile(direct, 0.5)), "vgpud-median-ms")
	}
	if profile != "" {
		vs, err := r.c.VGPUs(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if held := daemontest.Held(vs); len(held) != count {
			b.Fatalf("after the hook runs vgpud holds %v; want %d x %s reserved for %s", held, count, profile, name)
		}
		for _, v := range vs {
			if v.DomainName == name && v.State != "reserved" {
				b.Fatalf("%s is %s after release; want reserved", v.ID, v.State)
			}
		}
	}
	report(b, ds)
	b.ReportMetric(benchstat.Ms(benchstat.Quantile(prep, 0.5)), "prepare-median-ms")
}

// BenchmarkHookNoRequest: prepare+release of a domain without a request.
func BenchmarkHookNoRequest(b *testing.B) { benchHook(b, "", 0) }

// BenchmarkHookMdev: prepare+release of a domain with one T4-4Q: the
// first prepare swaps the mdev to the domain's UUID; later ones find it
// reserved for the domain (on-release: keep).
func BenchmarkHookMdev(b *testing.B) { benchHook(b, "t4-4q", 1) }

// BenchmarkHookVF: prepare+release of a domain with one MI25 VF, reserved
// at attach.
func BenchmarkHookVF(b *testing.B) { benchHook(b, "mi25-4g", 1) }

// BenchmarkVirshStartRequestFails times `virsh start` of a domain with a
// T4-4Q: the hook makes the mdev ready, libvirt fails the start (no VFIO
// here) and the release hook gives it back. Wall time of the whole failed
// start, as virsh sees it.
func BenchmarkVirshStartRequestFails(b *testing.B) {
	r := newRig(b, cfgKeep)
	const name = "bench-mdev"
	r.define(name, "3b4c5d6e-7f80-4192-a3b4-c5d6e7f80912", "t4-4q", 1)
	var ds []time.Duration
	for b.Loop() {
		for range samples {
			t := time.Now()
			_, errs, err := r.virsh("start", name)
			ds = append(ds, time.Since(t))
			if err == nil || !bytes.Contains([]byte(errs), []byte("Mediated host device assignment requires VFIO support")) {
				b.Fatalf("virsh start %s: %v: %s", name, err, errs)
			}
		}
	}
	b.StopTimer()
	vs, err := r.c.VGPUs(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	if held := daemontest.Held(vs); len(held) != 1 {
		b.Fatalf("after %d failed starts vgpud holds %v", len(ds), held)
	}
	for _, v := range vs {
		if v.DomainName == name && v.State != "reserved" {
			b.Fatalf("%s is %s after the failed starts; want reserved", v.ID, v.State)
		}
	}
	report(b, ds)
}
