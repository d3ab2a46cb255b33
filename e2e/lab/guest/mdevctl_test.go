//go:build labguest

package guest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMdevctlMbochs moves mbochs from Debian 13's mdevctl to vgpu on the
// real kernel: mdevctl defines two mbochs-large mdevs and starts one;
// vgpuctl import mdevctl reads what mdevctl wrote; apply and carve are
// refused while mdevctl would start an mdev there; after the import's
// mdevctl modify --manual the apply carves mbochs 4:1, keeps the running
// mdev, which mdevctl still lists as its own, and makes the defined one
// with its UUID (the import pins both).
func TestMdevctlMbochs(t *testing.T) {
	const running, defined = "6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44", "0b6f3c1e-2d4a-4e5b-8c7d-9e0f1a2b3c4d"
	mdevctl := func(args ...string) string {
		t.Helper()
		out, errs, code := run(t, "mdevctl", args...)
		if code != 0 {
			t.Fatalf("mdevctl %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}
	t.Cleanup(func() {
		// The guest's /etc/mdevctl.d is a tmpfs overlay, gone at shutdown;
		// later tests of this boot must find mbochs free.
		for _, u := range []string{running, defined} {
			run(t, "mdevctl", "stop", "-u", u)
			run(t, "mdevctl", "undefine", "-u", u)
		}
		vgpuctl(t, "uncarve", "mbochs")
	})
	mdevctl("define", "-u", running, "-p", "mbochs", "-t", "mbochs-large", "--auto")
	mdevctl("define", "-u", defined, "-p", "mbochs", "-t", "mbochs-large")
	mdevctl("start", "-u", running)

	imp, errs, code := vgpuctl(t, "import", "mdevctl")
	if code != 0 {
		t.Fatalf("import mdevctl: exit %d: %s", code, errs)
	}
	for _, want := range []string{"  - parent: \"mbochs\"\n    profile: lab-mbochs-64m\n",
		running + " (mbochs, start auto): pinned: running, vgpud's carve keeps it",
		defined + " (mbochs, start manual): pinned: not running, vgpud's carve makes it",
		"#   mdevctl modify -u " + running + " -p mbochs --manual"} {
		if !strings.Contains(imp, want) {
			t.Fatalf("the import lacks %q:\n%s", want, imp)
		}
	}
	cfg := filepath.Join(t.TempDir(), "imported.yaml")
	if err := os.WriteFile(cfg, []byte(imp), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "config.yaml")
	if _, errs, code := vgpuctl(t, "apply", "-f", cfg, "--config", target); code != 2 ||
		!strings.Contains(errs, "mdevctl starts mdevs on mbochs when it appears (start auto in /etc/mdevctl.d/mbochs: "+running+")") {
		t.Fatalf("apply while mdevctl starts an mbochs mdev: exit %d: %s", code, errs)
	}
	if _, errs, code := vgpuctl(t, "carve", "mbochs", "--profile", "lab-mbochs-64m"); code != 2 || !strings.Contains(errs, "mdevctl starts mdevs on mbochs") {
		t.Fatalf("carve while mdevctl starts an mbochs mdev: exit %d: %s", code, errs)
	}
	if got := mbochsInstances(t)["mbochs-large"]; !slices.Equal(got, []string{running}) {
		t.Fatalf("the refusals changed mbochs: %v", got)
	}

	mdevctl("modify", "-u", running, "-p", "mbochs", "--manual")
	if _, errs, code := vgpuctl(t, "apply", "-f", cfg, "--config", target); code != 0 {
		t.Fatalf("apply after mdevctl modify --manual: exit %d: %s", code, errs)
	}
	got := mbochsInstances(t)["mbochs-large"]
	if len(got) != 4 || !slices.Contains(got, running) || !slices.Contains(got, defined) {
		t.Fatalf("mbochs after the apply: %v; want 4 mbochs-large with %s and %s", got, running, defined)
	}
	if list := mdevctl("list"); !strings.Contains(list, running+" mbochs mbochs-large manual") {
		t.Errorf("mdevctl list after the apply:\n%s", list)
	}
}
