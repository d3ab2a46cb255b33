package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// cli runs vgpuctl in process against a fake kernel.
type cli struct {
	t     *testing.T
	k     *simkernel.Kernel
	state string
	// domains stands for libvirt's list of domains (recover-ledger).
	domains func(uri string) ([]engine.KnownDomain, error)
}

func newCLI(t *testing.T, hostFile string) *cli {
	t.Helper()
	return &cli{t: t, k: simkernel.NewExample(t, hostFile), state: t.TempDir()}
}

func (c *cli) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	// Globals go first: completion treats the last word as the one to complete.
	// No vgpud answers on the socket: vgpuctl works on the host directly.
	globals := []string{"--state-dir", c.state, "--pci-ids", "testdata/pci.ids", "--socket", filepath.Join(c.state, "no-vgpud.sock")}
	if len(args) > 0 && args[0] == "__complete" {
		args = append(append([]string{"__complete"}, globals...), args[1:]...)
	} else {
		args = append(globals, args...)
	}
	return runVgpuctl(args, c.host())
}

// through runs args against the vgpud on socket, with c's fake kernel as
// the host and no other global flag.
func (c *cli) through(socket string, args ...string) (stdout, stderr string, code int) {
	return runVgpuctl(append([]string{"--socket", socket}, args...), c.host())
}

// host is the env that reaches c's fake kernel (and c.domains).
func (c *cli) host() env {
	return env{openFS: func(string) sysfs.FS { return c.k }, listDomains: c.domains}
}

// ok runs args, wants exit 0 and no stderr, and returns stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	return wantOK(c.t, c.run, args...)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/vgpuctl -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (go test ./cmd/vgpuctl -update rewrites it)\n--- want\n%s\n--- got\n%s", p, want, got)
	}
}

func TestListings(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"gpus", []string{"gpus"}},
		{"gpus-json-t4", []string{"gpus", "0000:3b:00.0", "-o", "json"}},
		{"profiles", []string{"profiles"}},
		{"profiles-gpu-l40s", []string{"profiles", "--gpu", "0000:86:00.0"}},
		{"profiles-sources", []string{"profiles", "--sources"}},
		{"vgpus-empty", []string{"vgpus"}},
	} {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, c.ok(tc.args...)) })
	}
	// JSON parses and carries what the table summarises.
	var gj struct {
		GPUs []struct {
			Address  string   `json:"address"`
			Dialects []string `json:"dialects"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(c.ok("gpus", "-o", "json")), &gj); err != nil {
		t.Fatal(err)
	}
	if len(gj.GPUs) != 4 {
		t.Fatalf("%d GPUs in JSON, want 4", len(gj.GPUs))
	}
}

func TestCarveTour(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	steps := []struct {
		name string
		args []string
	}{
		{"carve-mi25-dry-run", []string{"carve", "0000:03:00.0", "--profile", "mi25-4g", "--dry-run"}},
		{"carve-mi25", []string{"carve", "0000:03:00.0", "--profile", "mi25-4g"}},
		{"carve-mi25-again", []string{"carve", "0000:03:00.0", "--profile", "mi25-4g"}},
		{"carve-t4-16", []string{"carve", "0000:3b:00.0", "-p", "t4-1q"}},
		{"carve-l40s", []string{"carve", "0000:86:00.0", "-p", "l40s-12q"}},
		{"vgpus-carved", []string{"vgpus"}},
		{"gpus-carved", []string{"gpus"}},
		{"uncarve-t4-json", []string{"uncarve", "0000:3b:00.0", "-o", "json"}},
		{"uncarve-mi25", []string{"uncarve", "0000:03:00.0"}},
		{"vgpus-after", []string{"vgpus"}},
	}
	for _, s := range steps {
		golden(t, "tour-"+s.name, c.ok(s.args...))
	}
	var vs []vgpu.VGPU
	if err := json.Unmarshal([]byte(c.ok("vgpus", "-o", "json")), &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) != 4 || vs[0].Profile != "l40s-12q" {
		t.Fatalf("after the tour: %+v", vs)
	}
}

func TestExitCodes(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	c.ok("carve", "0000:03:00.0", "-p", "mi25-4g")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"bad address", []string{"carve", "0000:03:00", "-p", "mi25-4g"}, exitUsage, `invalid PCI address "0000:03:00"`},
		{"address with whitespace", []string{"uncarve", " 0000:03:00.0\n"}, exitUsage, `invalid PCI address " 0000:03:00.0\n": whitespace around it`},
		{"no profile flag", []string{"carve", "0000:03:00.0"}, exitUsage, "--profile is required"},
		{"unknown profile", []string{"carve", "0000:03:00.0", "-p", "mi25-3g"}, exitUsage, "mi25-3g"},
		{"wrong gpu", []string{"carve", "0000:03:00.0", "-p", "t4-4q"}, exitUsage, "t4-4q"},
		{"not a gpu", []string{"carve", "0000:07:00.0", "-p", "mi25-4g"}, exitUsage, "0000:07:00.0"},
		{"bad output", []string{"gpus", "-o", "yaml"}, exitUsage, "allowed values are table, json"},
		{"unknown flag", []string{"gpus", "--nope"}, exitUsage, "unknown flag: --nope"},
		{"missing arg", []string{"uncarve"}, exitUsage, "takes 1 argument (GPU)"},
		{"bad catalog dir", []string{"profiles", "--profiles", "testdata/bad-catalog"}, exitUsage, "profiles[0].split"},
		{"an argument too many", []string{"vgpus", "extra"}, exitUsage, `vgpuctl vgpus takes no arguments, got ["extra"]`},
		{"arguments beyond cobra's maximum", []string{"gpus", "0000:03:00.0", "0000:3b:00.0"}, exitUsage, "accepts at most 1 arg(s), received 2"},
		{"unknown command", []string{"profilse"}, exitUsage, `unknown command "profilse" for "vgpuctl"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, code := c.run(tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errs, tc.code, tc.msg)
			}
		})
	}
	if n, err := sriov.NumVFs(c.k, pci.MustParseAddress("0000:03:00.0")); err != nil || n != 4 {
		t.Fatalf("the refused commands left %d VFs on 0000:03:00.0 (%v); want the 4 of mi25-4g", n, err)
	}
}

func TestInUseExitCode(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	c.ok("carve", "0000:03:00.0", "-p", "mi25-4g")
	grp, ok, err := pci.IOMMUGroup(c.k, pci.MustParseAddress("0000:03:00.2"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	h, err := c.k.OpenDevice(pci.GroupDevicePath(grp))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	before, _ := sysfstest.Snapshot(c.k)
	_, errs, code := c.run("uncarve", "0000:03:00.0")
	if code != exitInUse || !strings.Contains(errs, "0000:03:00.2 (qemu-system-x86 (pid ") || !strings.Contains(errs, "--force") {
		t.Fatalf("uncarve of a VF in use: exit %d, %q", code, errs)
	}
	after, _ := sysfstest.Snapshot(c.k)
	if d := sysfstest.Diff(before, after); d != "" {
		t.Fatalf("refused uncarve changed the host:\n%s", d)
	}
	golden(t, "vgpus-in-use", c.ok("vgpus"))
	golden(t, "uncarve-dry-run-in-use", c.ok("uncarve", "0000:03:00.0", "--dry-run"))

	// --force says first why it may take long: the kernel waits for the VM.
	go func() {
		time.Sleep(200 * time.Millisecond)
		h.Close()
	}()
	_, errs, code = c.run("uncarve", "0000:03:00.0", "--force")
	if code != exitOK || !strings.Contains(errs, "--force: destroying vGPUs in use: 0000:03:00.2 (qemu-system-x86 (pid ") ||
		!strings.Contains(errs, "vgpuctl waits until then") {
		t.Fatalf("forced uncarve of a VF in use: exit %d, %q", code, errs)
	}
}

func TestFaultMidCarve(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	before, _ := sysfstest.Snapshot(c.k)
	// The third VF's bind fails: two are bound already and must be undone.
	c.k.InjectFault(simkernel.Fault{Path: "/sys/bus/pci/devices/0000:03:00.3/driver_override", Nth: 1, Errno: syscall.EBUSY})
	_, errs, code := c.run("carve", "0000:03:00.0", "-p", "mi25-4g")
	if code != exitFailed || !strings.Contains(errs, "undone, the GPU is as it was") || !strings.Contains(errs, "device or resource busy") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	after, _ := sysfstest.Snapshot(c.k)
	if d := sysfstest.Diff(before, after); d != "" {
		t.Fatalf("failed carve left changes:\n%s", d)
	}
	// An undo that fails too gets exit 4 and says how to repair.
	c.k.InjectFault(simkernel.Fault{Path: "/sys/bus/pci/devices/0000:03:00.3/driver_override", Nth: 1, Errno: syscall.EBUSY})
	c.k.InjectFault(simkernel.Fault{Path: "/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs", Nth: 2, Errno: syscall.EIO, Always: true})
	_, errs, code = c.run("carve", "0000:03:00.0", "-p", "mi25-4g")
	if code != exitPartial || !strings.Contains(errs, "run the same command again") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	c.k.ClearFaults()
	c.ok("carve", "0000:03:00.0", "-p", "mi25-4g")
	if out := c.ok("vgpus"); strings.Count(out, "mi25-4g") != 4 {
		t.Fatalf("repair by running again:\n%s", out)
	}
}

func TestHelpAndMan(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	golden(t, "help", c.ok("--help"))
	golden(t, "help-carve", c.ok("carve", "--help"))
	dir := t.TempDir()
	c.ok("man", dir)
	for _, page := range []string{"vgpuctl.1", "vgpuctl-carve.1", "vgpuctl-uncarve.1", "vgpuctl-gpus.1", "vgpuctl-profiles.1", "vgpuctl-vgpus.1",
		"vgpuctl-import-mdevctl.1", "vgpuctl-import-vgpu-device-manager.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(".SH NAME")) {
			t.Fatalf("%s is not a man page", page)
		}
	}
}

func TestCompletion(t *testing.T) {
	c := newCLI(t, "mixed.yaml")
	// __complete reports its directive on stderr, as cobra's shell scripts expect.
	complete := func(args ...string) string {
		out, _, code := c.run(append([]string{"__complete"}, args...)...)
		if code != 0 {
			t.Fatalf("__complete %v: exit %d", args, code)
		}
		return out
	}
	out := complete("carve", "")
	for _, a := range []string{"0000:00:02.0", "0000:03:00.0", "0000:3b:00.0", "0000:86:00.0"} {
		if !strings.Contains(out, a+"\n") {
			t.Fatalf("completion of carve lacks %s:\n%s", a, out)
		}
	}
	out = complete("carve", "0000:03:00.0", "--profile", "mi25")
	if !strings.Contains(out, "mi25-4g\n") {
		t.Fatalf("profile completion:\n%s", out)
	}
	if out := c.ok("completion", "bash"); !strings.Contains(out, "__start_vgpuctl") {
		t.Fatal("bash completion script missing")
	}
}

// TestVirtualParent carves the kernel's mbochs sample by name, with the
// lab's test catalog: 4 x 64 MB from its 256 MB pool.
func TestVirtualParent(t *testing.T) {
	c := newCLI(t, "mbochs.yaml")
	cat := filepath.Join("..", "..", "e2e", "lab", "profiles")
	golden(t, "carve-mbochs", c.ok("carve", "mbochs", "-p", "lab-mbochs-64m", "--profiles", cat))
	if out := c.ok("carve", "mbochs", "-p", "lab-mbochs-64m", "--profiles", cat); !strings.Contains(out, "carve mbochs: nothing to do") {
		t.Fatalf("second carve:\n%s", out)
	}
	if out := c.ok("gpus"); !strings.Contains(out, "mbochs-large(0)") {
		t.Fatalf("the pool is not used up:\n%s", out)
	}
	wantParentVGPUs(t, "vgpus", c.ok("vgpus", "-o", "json", "--profiles", cat), 4)
	golden(t, "vgpus-mbochs", c.ok("vgpus", "--profiles", cat))
	_, errs, code := c.run("carve", "nosuch", "-p", "lab-mbochs-64m", "--profiles", cat)
	if code != exitUsage || !strings.Contains(errs, `"nosuch" among the virtual mdev parents (mbochs)`) {
		t.Fatalf("unknown parent: exit %d, %q", code, errs)
	}
	_, errs, code = c.run("carve", "mbochs", "-p", "mi25-4g", "--profiles", cat)
	if code != exitUsage {
		t.Fatalf("GPU profile on mbochs: exit %d, %q", code, errs)
	}
	golden(t, "uncarve-mbochs", c.ok("uncarve", "mbochs"))
	if out := c.ok("gpus"); !strings.Contains(out, "mbochs-large(4)") {
		t.Fatalf("uncarve did not give the pool back:\n%s", out)
	}
	wantParentVGPUs(t, "vgpus after the uncarve", c.ok("vgpus", "-o", "json", "--profiles", cat), 0)
}

// wantParentVGPUs checks that the JSON listing out holds n vGPUs of mbochs,
// mdevs of lab-mbochs-64m, and nothing else.
func wantParentVGPUs(t *testing.T, what, out string, n int) {
	t.Helper()
	var vs []vgpu.VGPU
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
	got := 0
	for _, v := range vs {
		if v.GPU == "mbochs" && v.Parent == "mbochs" && v.Kind == vgpu.KindMdev && v.Profile == "lab-mbochs-64m" && v.Type == "mbochs-large" {
			got++
		}
	}
	if got != n || len(vs) != n {
		t.Fatalf("%s lists %d vGPUs, %d of them lab-mbochs-64m mdevs of mbochs; want %d:\n%s", what, len(vs), got, n, out)
	}
}

// TestVirtualParentThroughVgpud: mbochs carved through a vgpud whose
// config does not name it is listed by vgpuctl vgpus, with vgpud and
// without.
func TestVirtualParentThroughVgpud(t *testing.T) {
	c := newCLI(t, "mbochs.yaml")
	cat := filepath.Join("..", "..", "e2e", "lab", "profiles")
	v := daemontest.Start(t, c.k, "", cat)
	through := func(args ...string) string {
		t.Helper()
		out, errs, code := c.through(v.Socket, args...)
		if code != 0 {
			t.Fatalf("vgpuctl %v through vgpud: exit %d: %s", args, code, errs)
		}
		return out
	}
	if out := through("carve", "mbochs", "-p", "lab-mbochs-64m"); !strings.Contains(out, "4 steps") {
		t.Fatalf("carve mbochs through vgpud:\n%s", out)
	}
	var vs []api.VGPU
	if err := json.Unmarshal([]byte(through("vgpus", "-o", "json")), &vs); err != nil {
		t.Fatal(err)
	}
	free := 0
	for _, x := range vs {
		if x.GPU == "mbochs" && x.Profile == "lab-mbochs-64m" && x.State == api.StateFree {
			free++
		}
	}
	if free != 4 || len(vs) != 4 {
		t.Fatalf("vgpuctl vgpus through vgpud: %+v; want 4 free lab-mbochs-64m mdevs of mbochs", vs)
	}
	if out := through("vgpus"); strings.Count(out, " lab-mbochs-64m ") != 4 {
		t.Fatalf("vgpuctl vgpus through vgpud:\n%s", out)
	}
	wantParentVGPUs(t, "vgpus without vgpud", c.ok("vgpus", "-o", "json", "--profiles", cat), 4)
}
