//go:build labguest

package guest

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

const mbochsTypes = "/sys/class/mdev_bus/mbochs/mdev_supported_types/"

func mbochsAvailable(t *testing.T) string {
	t.Helper()
	var out []string
	for _, ty := range []string{"mbochs-small", "mbochs-medium", "mbochs-large"} {
		out = append(out, readAttr(t, mbochsTypes+ty+"/available_instances"))
	}
	return strings.Join(out, "/")
}

func mbochsInstances(t *testing.T) map[string][]string {
	t.Helper()
	types, err := mdev.Types(host, "mbochs")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, ty := range types {
		out[ty.ID] = ty.Instances
	}
	return out
}

// TestCarveMbochs: the mbochs sample is carved by profile, from the lab's
// test catalog (e2e/lab/profiles/lab-mbochs.yaml, match: mdev-parent), as a
// split of its 256 MB framebuffer pool: 4 x 64 MB uses the whole pool, which
// the kernel's shared counters show; the instances open as VFIO devices; a
// held instance blocks a re-split; uncarve frees the pool.
func TestCarveMbochs(t *testing.T) {
	out, _, code := vgpuctl(t, "profiles")
	if code != 0 || !strings.Contains(out, "lab-mbochs-64m") || !strings.Contains(out, "lab-mbochs-16m") {
		t.Fatalf("vgpuctl profiles with the lab catalog: exit %d, lab-mbochs profiles missing", code)
	}
	ctx := context.Background()
	c := carver(t)
	if got := mbochsAvailable(t); got != "64/16/4" {
		t.Fatalf("mbochs available before: %s, want 64/16/4", got)
	}
	res, err := c.Carve(ctx, vgpu.Parent("mbochs"), "lab-mbochs-64m", carve.Options{})
	if err != nil {
		t.Fatalf("carve mbochs lab-mbochs-64m: %v\n%s", err, res.Plan)
	}
	t.Logf("carve mbochs lab-mbochs-64m: %d steps\n%s", res.Applied, res.Plan)
	inst := mbochsInstances(t)
	if len(inst["mbochs-large"]) != 4 {
		t.Fatalf("after carve: instances %v, want 4 mbochs-large", inst)
	}
	if got := mbochsAvailable(t); got != "0/0/0" {
		t.Errorf("available after a 4:1 split of the pool: %s, want 0/0/0", got)
	}
	for i := range 4 {
		u := carve.MdevUUID("mbochs", "mbochs-large", i)
		in, ok, err := mdev.Get(host, u)
		if err != nil || !ok || in.Type != "mbochs-large" || in.IOMMUGroup < 0 {
			t.Errorf("instance %d: %s %+v %v %v", i, u, in, ok, err)
			continue
		}
		mustOpenVFIO(t, sysfs.MdevDevices+"/"+u, u).Close()
	}
	if res, err := c.Carve(ctx, vgpu.Parent("mbochs"), "lab-mbochs-64m", carve.Options{}); err != nil || !res.Plan.Empty() {
		t.Errorf("carve again: %v, plan:\n%s", err, res.Plan)
	}
	if n := mbochsListed(t, "--socket", "/nonexistent/vgpud.sock"); n != 4 {
		t.Errorf("vgpuctl vgpus lists %d lab-mbochs-64m mdevs of mbochs, want 4", n)
	}

	held := carve.MdevUUID("mbochs", "mbochs-large", 1)
	s := mustOpenVFIO(t, sysfs.MdevDevices+"/"+held, held)
	_, err = c.Carve(ctx, vgpu.Parent("mbochs"), "lab-mbochs-16m", carve.Options{})
	if !errors.Is(err, carve.ErrInUse) || !strings.Contains(err.Error(), held) {
		t.Errorf("re-split with %s held: %v; want ErrInUse naming it", held, err)
	}
	if n := len(mbochsInstances(t)["mbochs-large"]); n != 4 {
		t.Errorf("a refused re-split left %d instances, want 4", n)
	}
	s.Close()

	if res, err := c.Carve(ctx, vgpu.Parent("mbochs"), "lab-mbochs-16m", carve.Options{}); err != nil {
		t.Fatalf("carve lab-mbochs-16m: %v\n%s", err, res.Plan)
	}
	inst = mbochsInstances(t)
	if len(inst["mbochs-large"]) != 0 || len(inst["mbochs-medium"]) != 16 {
		t.Errorf("after the 16:1 split: %v", inst)
	}
	if got := mbochsAvailable(t); got != "0/0/0" {
		t.Errorf("available after a 16:1 split of the pool: %s, want 0/0/0", got)
	}
	// The full pool refuses more, and vgpu says so.
	err = mdev.Create(host, "mbochs", "mbochs-small", "0f4d6a1c-4b2e-4a57-9a55-1b2d3c4e5f99")
	if !errors.Is(err, mdev.ErrNoCapacity) {
		t.Errorf("an instance on the full pool: %v, want ErrNoCapacity (ENOSPC)", err)
	}

	if res, err := c.Uncarve(ctx, vgpu.Parent("mbochs"), carve.Options{}); err != nil {
		t.Fatalf("uncarve mbochs: %v\n%s", err, res.Plan)
	}
	if got := mbochsAvailable(t); got != "64/16/4" {
		t.Errorf("available after uncarve: %s, want 64/16/4", got)
	}
	carveMbochsThroughVgpud(t)
}

// mbochsListed counts the lab-mbochs-64m mdevs of mbochs vgpuctl vgpus
// lists, run with args (through vgpud, or --socket elsewhere: without).
func mbochsListed(t *testing.T, args ...string) int {
	t.Helper()
	out, _, code := vgpuctl(t, append(args, "vgpus", "-o", "json")...)
	if code != 0 {
		t.Fatalf("vgpuctl vgpus: exit %d", code)
	}
	var vs []struct{ GPU, Kind, Profile string }
	decode(t, out, &vs)
	n := 0
	for _, v := range vs {
		if v.GPU == "mbochs" && v.Kind == "mdev" && v.Profile == "lab-mbochs-64m" {
			n++
		}
	}
	return n
}

// carveMbochsThroughVgpud: mbochs carved by vgpuctl through a vgpud whose
// config does not name it is listed, by vgpud (also after a SIGHUP) and
// by vgpuctl on its own (issue 22.6).
func carveMbochsThroughVgpud(t *testing.T) {
	stop, _, pid := startVgpudCmd(t, []string{"vgpud"}, "version: v1\nsocket:\n  group: \"0\"\n")
	defer stop()
	c := client.New(vgpudSocket)
	for deadline := time.Now().Add(time.Minute); !c.Available(context.Background(), time.Second); {
		if time.Now().After(deadline) {
			t.Fatal("vgpud did not answer within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _, code := vgpuctl(t, "carve", "mbochs", "-p", "lab-mbochs-64m"); code != 0 || !strings.Contains(out, "4 steps") {
		t.Fatalf("vgpuctl carve mbochs through vgpud: exit %d", code)
	}
	if n := mbochsListed(t); n != 4 {
		t.Errorf("vgpuctl vgpus through vgpud lists %d lab-mbochs-64m mdevs of mbochs, want 4", n)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		h, err := c.Health(context.Background())
		if err == nil && h.ConfigGeneration == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vgpud did not reload on SIGHUP within a minute: %+v, %v", h, err)
		}
	}
	if n := mbochsListed(t); n != 4 {
		t.Errorf("vgpuctl vgpus through vgpud after a SIGHUP lists %d lab-mbochs-64m mdevs of mbochs, want 4", n)
	}
	if n := mbochsListed(t, "--socket", "/nonexistent/vgpud.sock"); n != 4 {
		t.Errorf("vgpuctl vgpus without vgpud lists %d lab-mbochs-64m mdevs of mbochs, want 4", n)
	}
	if _, _, code := vgpuctl(t, "uncarve", "mbochs"); code != 0 {
		t.Errorf("vgpuctl uncarve mbochs through vgpud: exit %d", code)
	}
	if got := mbochsAvailable(t); got != "64/16/4" {
		t.Errorf("available after the uncarve through vgpud: %s, want 64/16/4", got)
	}
}
